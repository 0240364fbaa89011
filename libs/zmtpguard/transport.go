package zmtpguard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/go-zeromq/zmq4/transport"
)

// Rejection is a connection the guard failed: an announcement over a limit
// (Err wraps ErrTooLarge) or a handshake too slow (ErrHandshakeTimeout).
type Rejection struct {
	Peer net.Addr
	Err  error
}

// Conn is a net.Conn whose reads pass through a Reader. On a rejection it
// closes the connection itself: zmq4 does not close a connection whose
// handshake failed.
type Conn struct {
	net.Conn
	g      *Reader
	report func(Rejection)
	// handshaking is set while the handshake deadline is armed; only the
	// reading goroutine touches it.
	handshaking bool
	timeout     time.Duration
	closeOnce   sync.Once
}

// NewConn guards c with lim (zero fields: defaults), arming the handshake
// deadline. report, if not nil, is called once when the guard fails c.
func NewConn(c net.Conn, lim Limits, report func(Rejection)) *Conn {
	lim = lim.WithDefaults()
	gc := &Conn{Conn: c, g: NewReader(c, lim), report: report, timeout: lim.HandshakeTimeout}
	if lim.HandshakeTimeout > 0 {
		if err := c.SetReadDeadline(time.Now().Add(lim.HandshakeTimeout)); err == nil {
			gc.handshaking = true
		}
	}
	return gc
}

// Read implements net.Conn.
func (c *Conn) Read(p []byte) (int, error) {
	n, err := c.g.Read(p)
	if c.handshaking && c.g.Commands() > 0 {
		// The peer's first command is in: the handshake no longer waits on
		// it, and an idle subscription is legitimate.
		c.handshaking = false
		if derr := c.SetReadDeadline(time.Time{}); derr != nil && err == nil {
			err = fmt.Errorf("zmtpguard: clear handshake deadline: %w", derr)
		}
	}
	if err == nil {
		return n, nil
	}
	var ne net.Error
	switch {
	case errors.Is(err, ErrTooLarge):
		c.fail(err)
	case c.handshaking && errors.As(err, &ne) && ne.Timeout():
		err = &handshakeError{timeout: c.timeout}
		c.fail(err)
	case c.handshaking:
		// zmq4 would leave the connection open after the failed handshake.
		c.closeOnce.Do(func() { _ = c.Close() })
	}
	return n, err
}

// fail closes the connection and reports why, once.
func (c *Conn) fail(err error) {
	c.closeOnce.Do(func() {
		_ = c.Close()
		if c.report != nil {
			c.report(Rejection{Peer: c.RemoteAddr(), Err: err})
		}
	})
}

// handshakeError wraps ErrHandshakeTimeout as a net.Error that is not a
// timeout, so zmq4 treats the connection as closed rather than retrying.
type handshakeError struct{ timeout time.Duration }

func (e *handshakeError) Error() string {
	return fmt.Sprintf("zmtpguard: handshake timed out: no command from the peer within %s", e.timeout)
}
func (e *handshakeError) Unwrap() error   { return ErrHandshakeTimeout }
func (e *handshakeError) Timeout() bool   { return false }
func (e *handshakeError) Temporary() bool { return false }

// guarded is a zmq4 transport: TCP with every connection guarded.
type guarded struct {
	lim    Limits
	report func(Rejection)
	tcp    transport.Transport
}

func (t guarded) Dial(ctx context.Context, d transport.Dialer, addr string) (net.Conn, error) {
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err //nolint:wrapcheck // zmq4 wraps it with the endpoint
	}
	return NewConn(c, t.lim, t.report), nil
}

func (t guarded) Listen(ctx context.Context, addr string) (net.Listener, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("zmtpguard: listen %s: %w", addr, err)
	}
	return listener{Listener: ln, t: t}, nil
}

func (t guarded) Addr(ep string) (string, error) {
	a, err := t.tcp.Addr(ep)
	if err != nil {
		return "", fmt.Errorf("zmtpguard: %w", err)
	}
	return a, nil
}

type listener struct {
	net.Listener
	t guarded
}

func (l listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err //nolint:wrapcheck // zmq4's accept loop only retries
	}
	return NewConn(c, l.t.lim, l.t.report), nil
}

// schemes numbers registered transports: zmq4's registry is global and
// refuses a name twice, and each caller has its own limits and report.
var schemes atomic.Uint64

// Register adds a guarded TCP transport to zmq4 with lim (zero fields:
// defaults) and returns its scheme; give it endpoints through Endpoint.
// report, if not nil, is called from the reading goroutine for every
// connection the guard fails; it must not block. Each call registers a new
// scheme, so call it once per component, not per connection.
func Register(lim Limits, report func(Rejection)) (string, error) {
	scheme := fmt.Sprintf("zmtpguard-tcp-%d", schemes.Add(1))
	t := guarded{lim: lim.WithDefaults(), report: report, tcp: transport.New("tcp")}
	if err := zmq4.RegisterTransport(scheme, t); err != nil {
		return "", fmt.Errorf("zmtpguard: register %s: %w", scheme, err)
	}
	return scheme, nil
}

// Endpoint rewrites a tcp:// endpoint to scheme; other transports (ipc,
// inproc: local peers) and endpoints already rewritten are returned as
// they are.
func Endpoint(scheme, endpoint string) string {
	if rest, ok := strings.CutPrefix(endpoint, "tcp://"); ok {
		return scheme + "://" + rest
	}
	return endpoint
}
