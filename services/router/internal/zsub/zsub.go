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
func Dial(ctx context.Context, endpoint, prefix string) (zmq4.Socket, error) {
	sub := zmq4.NewSub(ctx, zmq4.WithLogger(Quiet()), zmq4.WithAutomaticReconnect(true),
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
