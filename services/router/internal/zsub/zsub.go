// Package zsub dials the zmq4 SUB sockets the router's event subscribers
// use (kvsub for workers, l2view for cache servers): one place that knows
// zmq4's handshake ignores contexts and that its own logging must be quiet.
package zsub

import (
	"context"
	"fmt"
	"io"
	"log"
	"time"

	"github.com/go-zeromq/zmq4"
)

// Dial returns a SUB socket subscribed to topics starting with prefix and
// connected to endpoint (already wrapped by zmtpguard.Endpoint when the
// caller guards its peers). The socket lives until ctx ends or the caller
// closes it; the caller must close it when err is nil.
//
// The socket does not reconnect by itself: when its connection fails,
// Recv returns the error and the caller dials again (and catches up
// through replay). zmq4's automatic reconnect re-dials from inside the
// failed read or write, and when a write fails while the socket holds its
// lock (the subscription sent right after the handshake) that nested dial
// deadlocks the socket for good (go-zeromq/zmq4 v0.17.0, socket.go's
// scheduleRmConn calling Dial; TestDialSurvivesAConnectionBrokenAfterHandshake).
func Dial(ctx context.Context, endpoint, prefix string) (zmq4.Socket, error) {
	sub := zmq4.NewSub(ctx, zmq4.WithLogger(Quiet()),
		zmq4.WithDialerRetry(250*time.Millisecond), zmq4.WithDialerMaxRetries(4))
	if err := sub.SetOption(zmq4.OptionSubscribe, prefix); err != nil {
		_ = sub.Close()
		return nil, fmt.Errorf("subscribe: %w", err)
	}
	// zmq4's handshake ignores the context: dial aside, stop waiting on ctx.
	dialed := make(chan error, 1)
	go func() {
		defer func() {
			if v := recover(); v != nil {
				dialed <- fmt.Errorf("dial panicked: %v", v)
			}
		}()
		dialed <- sub.Dial(endpoint)
	}()
	select {
	case err := <-dialed:
		if err != nil {
			_ = sub.Close()
			return nil, fmt.Errorf("dial: %w", err)
		}
	case <-ctx.Done():
		_ = sub.Close()
		return nil, ctx.Err()
	}
	return sub, nil
}

// Quiet silences zmq4's own logging (it reports reconnects the callers
// handle themselves).
func Quiet() *log.Logger { return log.New(io.Discard, "", 0) }

// Backoff is the wait before dialing a publisher again: it doubles from
// First up to 30s while connections fail, and starts again from First
// after a connection that stayed up a minute, so that a worker restarted
// once a day is not redialed as slowly as one that is flapping.
type Backoff struct {
	First time.Duration
	next  time.Duration
}

// maxBackoff bounds the wait, and stableFor is how long a connection must
// have lasted for the next failure to count as the first.
const (
	maxBackoff = 30 * time.Second
	stableFor  = time.Minute
)

// Next returns the wait after a connection that lasted up (zero when the
// dial itself failed).
func (b *Backoff) Next(up time.Duration) time.Duration {
	if b.next == 0 || up >= stableFor {
		b.next = b.First
	}
	wait := b.next
	b.next = min(2*b.next, maxBackoff)
	return wait
}
