package zsub_test

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/go-zeromq/zmq4/transport"

	"github.com/warmpath/warmpath/services/router/internal/zsub"
)

// breakingTransport is TCP whose first connection breaks on its fourth
// write: the SUB socket's greeting and READY command go through, and the
// subscription it sends right after the handshake meets a reset, as it
// would if the publisher went away at that moment.
type breakingTransport struct{ dials *atomic.Int64 }

func (t breakingTransport) Dial(ctx context.Context, d transport.Dialer, addr string) (net.Conn, error) {
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	if t.dials.Add(1) > 1 {
		return c, nil
	}
	return &breakingConn{Conn: c, breakAt: 4}, nil
}

func (breakingTransport) Listen(context.Context, string) (net.Listener, error) {
	return nil, fmt.Errorf("breakingTransport only dials")
}

func (breakingTransport) Addr(ep string) (string, error) { return ep, nil }

type breakingConn struct {
	net.Conn
	writes, breakAt int
}

func (c *breakingConn) Write(p []byte) (int, error) {
	c.writes++
	if c.writes == c.breakAt {
		// The write fails first and the read side a moment later, so that
		// the failing write is what zmq4 sees first.
		time.AfterFunc(50*time.Millisecond, func() { _ = c.Close() })
		return 0, &net.OpError{Op: "write", Net: "tcp", Err: syscall.ECONNRESET}
	}
	return c.Conn.Write(p) //nolint:wrapcheck // the test's stand-in for a socket
}

// TestDialSurvivesAConnectionBrokenAfterHandshake is a regression test:
// zmq4's automatic reconnect re-dials from inside the failed write, while
// the socket's lock is held for that write, and the socket deadlocked for
// good, so the router never heard from that worker again.
func TestDialSurvivesAConnectionBrokenAfterHandshake(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pub := zmq4.NewPub(ctx, zmq4.WithLogger(zsub.Quiet()))
	defer pub.Close()
	if err := pub.Listen("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	scheme := fmt.Sprintf("zsubtest-breaking-%d", time.Now().UnixNano())
	var dials atomic.Int64
	if err := zmq4.RegisterTransport(scheme, breakingTransport{dials: &dials}); err != nil {
		t.Fatal(err)
	}

	type result struct {
		sub zmq4.Socket
		err error
	}
	dialed := make(chan result, 1)
	go func() {
		sub, err := zsub.Dial(ctx, scheme+"://"+pub.Addr().String(), "")
		dialed <- result{sub, err}
	}()
	var r result
	select {
	case r = <-dialed:
	case <-time.After(10 * time.Second):
		t.Fatalf("Dial hung after the connection broke (%d dials)", dials.Load())
	}
	if r.err != nil {
		return // a failed dial is fine: the caller dials again
	}
	defer r.sub.Close()
	// The one connection is broken: the caller must hear of it, so that it
	// dials again, rather than wait on a dead socket.
	received := make(chan error, 1)
	go func() {
		_, err := r.sub.Recv()
		received <- err
	}()
	select {
	case err := <-received:
		if err == nil {
			t.Fatal("Recv returned a message on a socket whose only connection broke")
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("Recv hung on a socket whose only connection broke (%d dials)", dials.Load())
	}
}

func TestBackoff(t *testing.T) {
	const first = 100 * time.Millisecond
	for _, tc := range []struct {
		name string
		ups  []time.Duration
		want []time.Duration
	}{
		{"doubles while dials fail", []time.Duration{0, 0, 0}, []time.Duration{first, 2 * first, 4 * first}},
		{"short connections still double", []time.Duration{time.Second, 10 * time.Second}, []time.Duration{first, 2 * first}},
		{"stops at 30s", make([]time.Duration, 12), []time.Duration{
			first, 2 * first, 4 * first, 8 * first, 16 * first, 32 * first, 64 * first, 128 * first, 256 * first,
			30 * time.Second, 30 * time.Second, 30 * time.Second,
		}},
		{"a connection up a minute starts again", []time.Duration{0, 0, 0, time.Minute, 0}, []time.Duration{
			first, 2 * first, 4 * first, first, 2 * first,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := zsub.Backoff{First: first}
			for i, up := range tc.ups {
				if got := b.Next(up); got != tc.want[i] {
					t.Errorf("wait %d after up %s: got %s, want %s", i, up, got, tc.want[i])
				}
			}
		})
	}
}
