package zmtpguard

import (
	"bytes"
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
	// ahead is what readAhead read, already checked, for zmq4 to read
	// first; sent is the greeting readAhead sent, which zmq4's own first
	// write must repeat and is not sent again.
	ahead, sent []byte
}

// nullGreeting is the greeting zmq4 v0.17.0 sends on every connection of
// the NULL mechanism (protocol.go's greeting.marshal: version 3.0,
// as-server 0).
func nullGreeting() []byte {
	g := make([]byte, GreetingLen)
	g[0], g[9], g[10], g[11] = 0xFF, 0x7F, 3, 0
	copy(g[12:32], "NULL")
	return g
}

// maxFirstCommand bounds the frames a listener reads ahead, up to the end
// of the first command: a READY or HELLO of a few properties; held for
// every pending handshake, it must stay far below MaxFrame.
const maxFirstCommand = 64 << 10

// readAhead does the network part of a listening socket's handshake before
// zmq4 sees the connection: it sends zmq4's greeting (a ZMTP peer may wait
// for it before sending the rest of its own) and reads the peer's greeting
// and first command, no further, through the guard: Read fails an oversize
// frame or a handshake past its deadline, as for any connection.
func (c *Conn) readAhead() error {
	if c.timeout > 0 {
		if err := c.SetWriteDeadline(time.Now().Add(c.timeout)); err != nil {
			return fmt.Errorf("zmtpguard: %w", err)
		}
	}
	c.sent = nullGreeting()
	if _, err := c.Conn.Write(c.sent); err != nil {
		return fmt.Errorf("zmtpguard: send greeting: %w", err)
	}
	if err := c.SetWriteDeadline(time.Time{}); err != nil {
		return fmt.Errorf("zmtpguard: %w", err)
	}
	c.g.firstCommandMax = maxFirstCommand
	var buf []byte
	chunk := make([]byte, 4096)
	for c.g.Commands() == 0 {
		n, err := c.Read(chunk[:min(c.g.Next(), uint64(len(chunk)))])
		buf = append(buf, chunk[:n]...)
		if err != nil {
			return err
		}
	}
	c.ahead = buf
	return nil
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
	if len(c.ahead) > 0 {
		n := copy(p, c.ahead)
		c.ahead = c.ahead[n:]
		return n, nil
	}
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

// Write implements net.Conn. zmq4's greeting, when readAhead sent it
// already, is checked and not sent again.
func (c *Conn) Write(p []byte) (int, error) {
	if len(c.sent) == 0 {
		return c.Conn.Write(p) //nolint:wrapcheck // zmq4 wraps it
	}
	n := min(len(p), len(c.sent))
	if !bytes.Equal(p[:n], c.sent[:n]) {
		err := errors.New("zmtpguard: zmq4's greeting differs from the one sent ahead of it")
		c.fail(err)
		return 0, err
	}
	c.sent = c.sent[n:]
	if n == len(p) {
		return n, nil
	}
	m, err := c.Conn.Write(p[n:])
	return n + m, err //nolint:wrapcheck // zmq4 wraps it
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
	return newListener(ln, t), nil
}

func (t guarded) Addr(ep string) (string, error) {
	a, err := t.tcp.Addr(ep)
	if err != nil {
		return "", fmt.Errorf("zmtpguard: %w", err)
	}
	return a, nil
}

// listener hands zmq4 only connections whose handshake has arrived. zmq4
// (v0.17.0, socket.go's accept) runs each accepted connection's handshake
// before it accepts the next one, so a peer that stalls mid-greeting would
// keep the socket from taking anyone else for a whole HandshakeTimeout, and
// a peer stalling once per timeout would keep it shut for good. Here each
// connection's handshake runs in its own goroutine (at most
// maxPendingHandshakes at once): the guard sends zmq4's greeting ahead of
// it, reads the peer's greeting and first command within the timeout, and
// zmq4 then opens the connection from what is already buffered.
type listener struct {
	net.Listener
	t guarded

	start     sync.Once
	accepted  chan net.Conn
	errs      chan error
	done      chan struct{}
	closeOnce sync.Once
	pending   chan struct{} // a slot per handshake in progress
}

// maxPendingHandshakes bounds the connections a listener holds while their
// handshakes arrive; one more is closed at once.
const maxPendingHandshakes = 256

func newListener(ln net.Listener, t guarded) *listener {
	return &listener{Listener: ln, t: t, accepted: make(chan net.Conn), errs: make(chan error),
		done: make(chan struct{}), pending: make(chan struct{}, maxPendingHandshakes)}
}

func (l *listener) Accept() (net.Conn, error) {
	l.start.Do(func() { go l.acceptLoop() })
	select {
	case c := <-l.accepted:
		return c, nil
	case err := <-l.errs:
		return nil, err
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *listener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close() //nolint:wrapcheck // zmq4 ignores it
}

func (l *listener) acceptLoop() {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			select {
			case l.errs <- err: // zmq4's accept loop only retries
			case <-l.done:
				return
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond) // out of descriptors: do not spin
			continue
		}
		select {
		case l.pending <- struct{}{}:
			go l.handshake(c)
		default:
			_ = c.Close()
		}
	}
}

// handshake waits for c's greeting and first command, then hands it to
// zmq4; a connection the guard failed, or that ended, is dropped here.
func (l *listener) handshake(c net.Conn) {
	defer func() { <-l.pending }()
	gc := NewConn(c, l.t.lim, l.t.report)
	if err := gc.readAhead(); err != nil {
		_ = gc.Close()
		return
	}
	select {
	case l.accepted <- gc:
	case <-l.done:
		_ = gc.Close()
	}
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
