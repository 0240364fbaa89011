// Package upstream is the router's HTTP/1.1 client to its workers.
//
// net/http's Transport hands every request to two goroutines per
// connection (a writer and a reader) and back, and every hand-off is a
// scheduler wake-up; on a small machine those wake-ups cost more tail
// latency than the rest of the router (docs/benchmarks.md). This client
// writes the request and reads the response in the caller's goroutine, on
// pooled keep-alive connections, and leaves parsing to the standard
// library (http.ReadResponse), so response framing — Content-Length,
// chunked, close-delimited — is exactly net/http's.
//
// Timeouts are connection deadlines, set before each blocking step; a
// context cancellation (the client left, the request's total timeout)
// expires them at once through context.AfterFunc, which costs no goroutine
// until it fires.
package upstream

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/net/http/httpguts"
)

// ErrTimeout reports that a worker sent nothing within the request's head
// or read timeout (the context was still live).
var ErrTimeout = errors.New("upstream: timed out waiting for the worker")

// ErrNotSent marks a failure before the whole request was written: the
// worker cannot have acted on it, so it is safe to send elsewhere.
var ErrNotSent = errors.New("upstream: request not sent")

// Config tunes a Client. Zero fields take the defaults shown.
type Config struct {
	// DialTimeout bounds connecting to a worker (3s).
	DialTimeout time.Duration
	// IdleConnTimeout closes pooled connections idle for longer (4s). It is
	// below uvicorn's 5 s keep-alive, which vLLM's API server uses, so the
	// router does not write a request into a connection the worker is
	// closing.
	IdleConnTimeout time.Duration
	// MaxIdlePerHost bounds the pooled connections per worker (256).
	MaxIdlePerHost int
	// BufferSize is each connection's read and write buffer (64 KiB): large
	// enough that headers and a typical prompt leave in one write.
	BufferSize int
	// TLS configures https:// workers; nil uses the defaults.
	TLS *tls.Config
}

func (c *Config) defaults() {
	if c.DialTimeout <= 0 {
		c.DialTimeout = 3 * time.Second
	}
	if c.IdleConnTimeout <= 0 {
		c.IdleConnTimeout = 4 * time.Second
	}
	if c.MaxIdlePerHost <= 0 {
		c.MaxIdlePerHost = 256
	}
	if c.BufferSize <= 0 {
		c.BufferSize = 64 << 10
	}
}

// Client sends requests to workers over pooled connections. It is safe
// for concurrent use; the zero value is not usable (call New).
type Client struct {
	cfg    Config
	dialer net.Dialer

	mu   sync.Mutex // guards idle
	idle map[string][]*conn
}

// New returns a client with cfg's settings.
func New(cfg Config) *Client {
	cfg.defaults()
	return &Client{
		cfg:    cfg,
		dialer: net.Dialer{Timeout: cfg.DialTimeout, KeepAlive: 30 * time.Second},
		idle:   map[string][]*conn{},
	}
}

// Target is where requests go: a worker's scheme, host and path prefix.
type Target struct {
	// Addr is host:port.
	Addr string
	// TLS says the worker speaks https.
	TLS bool
	// Host is the Host header (Addr without a default port).
	Host string
	// Prefix is prepended to every request URI ("" or a path without a
	// trailing slash).
	Prefix string
}

// Request is one request to a worker. Header must not carry hop-by-hop,
// Host or Content-Length fields; the client writes those itself.
type Request struct {
	Method string
	// URI is the path and query, e.g. "/v1/completions".
	URI    string
	Header http.Header
	Body   []byte
	// HeadTimeout bounds sending the request and receiving the response's
	// status line and headers; 0 means no limit.
	HeadTimeout time.Duration
	// ReadTimeout bounds each read of the response body (until changed
	// with Body.SetReadTimeout); 0 means no limit.
	ReadTimeout time.Duration
}

// Response is a worker's answer. Its Body must be closed.
type Response struct {
	StatusCode    int
	Header        http.Header
	ContentLength int64
	Body          *Body
}

// conn is one pooled connection.
type conn struct {
	nc        net.Conn
	br        *bufio.Reader
	bw        *bufio.Writer
	idleSince time.Time
	reused    bool
}

// Do sends req to t and returns the response once its headers arrived.
// Errors wrap the cause: a *net.OpError with Op "dial" for connect
// failures, ErrNotSent when the request could not be written whole,
// ErrTimeout for a worker that stalls, ctx.Err() when ctx ended.
func (c *Client) Do(ctx context.Context, t Target, req *Request) (*Response, error) {
	for attempt := 0; ; attempt++ {
		cn, err := c.get(ctx, t)
		if err != nil {
			return nil, err
		}
		resp, err := c.roundTrip(ctx, t, cn, req)
		if err == nil {
			return resp, nil
		}
		_ = cn.nc.Close()
		// A pooled connection the worker closed while it sat idle fails
		// before any byte of an answer: send once more on a fresh one.
		if attempt == 0 && cn.reused && ctx.Err() == nil && staleConn(err) {
			continue
		}
		return nil, c.classify(ctx, err)
	}
}

func (c *Client) roundTrip(ctx context.Context, t Target, cn *conn, req *Request) (*Response, error) {
	stop := context.AfterFunc(ctx, func() { _ = cn.nc.SetDeadline(time.Unix(1, 0)) })
	if req.HeadTimeout > 0 {
		_ = cn.nc.SetDeadline(time.Now().Add(req.HeadTimeout))
	} else {
		_ = cn.nc.SetDeadline(time.Time{})
	}
	if err := writeRequest(cn.bw, t, req); err != nil {
		stop()
		return nil, fmt.Errorf("upstream: write request: %w: %w", ErrNotSent, noAnswer{err})
	}
	// Wait for the answer's first byte apart from parsing it: a connection
	// that ends before any byte is one the worker closed while it sat in
	// the pool (Do sends again), not a broken answer.
	if _, err := cn.br.Peek(1); err != nil {
		stop()
		return nil, fmt.Errorf("upstream: read response: %w", noAnswer{err})
	}
	probe := &http.Request{Method: req.Method}
	var resp *http.Response
	for {
		var err error
		// The body is closed through Body.Close, which owns it.
		if resp, err = http.ReadResponse(cn.br, probe); err != nil { //nolint:bodyclose // see above
			stop()
			return nil, fmt.Errorf("upstream: read response: %w", err)
		}
		// Informational answers (103 Early Hints) precede the real one.
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			break
		}
	}
	b := &Body{client: c, target: t.Addr, cn: cn, rc: resp.Body, stop: stop, ctx: ctx,
		keep: !resp.Close, timeout: req.ReadTimeout, deadline: req.HeadTimeout > 0}
	return &Response{StatusCode: resp.StatusCode, Header: resp.Header, ContentLength: resp.ContentLength, Body: b}, nil
}

// noAnswer marks a failure before any byte of the answer arrived.
type noAnswer struct{ error }

func (e noAnswer) Unwrap() error { return e.error }

// staleConn reports errors of a connection closed by its peer before any
// byte of the answer was read.
func staleConn(err error) bool {
	var na noAnswer
	return errors.As(err, &na) &&
		(errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE))
}

// classify maps deadline errors to the reason they fired.
func (c *Client) classify(ctx context.Context, err error) error {
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		return err
	}
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("upstream: %w", cerr)
	}
	return fmt.Errorf("%w: %w", ErrTimeout, err)
}

func writeRequest(w *bufio.Writer, t Target, req *Request) error {
	_, _ = w.WriteString(req.Method)
	_ = w.WriteByte(' ')
	_, _ = w.WriteString(t.Prefix)
	_, _ = w.WriteString(req.URI)
	_, _ = w.WriteString(" HTTP/1.1\r\nHost: ")
	_, _ = w.WriteString(t.Host)
	if req.Body != nil || req.Method == http.MethodPost || req.Method == http.MethodPut {
		_, _ = w.WriteString("\r\nContent-Length: ")
		_, _ = w.WriteString(strconv.Itoa(len(req.Body)))
	}
	_, _ = w.WriteString("\r\n")
	for k, vv := range req.Header {
		// Names and values reach here from clients; one with a line
		// break would smuggle a second request onto the connection.
		if !httpguts.ValidHeaderFieldName(k) {
			continue
		}
		for _, v := range vv {
			if !httpguts.ValidHeaderFieldValue(v) {
				continue
			}
			_, _ = w.WriteString(k)
			_, _ = w.WriteString(": ")
			_, _ = w.WriteString(v)
			_, _ = w.WriteString("\r\n")
		}
	}
	_, _ = w.WriteString("\r\n")
	_, _ = w.Write(req.Body)
	return w.Flush()
}

// get returns a pooled connection to t or dials a new one.
func (c *Client) get(ctx context.Context, t Target) (*conn, error) {
	now := time.Now()
	c.mu.Lock()
	list := c.idle[t.Addr]
	var stale []*conn
	for len(list) > 0 && now.Sub(list[0].idleSince) > c.cfg.IdleConnTimeout {
		stale = append(stale, list[0])
		list = list[1:]
	}
	var cn *conn
	if n := len(list); n > 0 {
		cn, list = list[n-1], list[:n-1]
	}
	c.idle[t.Addr] = list
	c.mu.Unlock()
	for _, s := range stale {
		_ = s.nc.Close()
	}
	if cn != nil {
		cn.reused = true
		return cn, nil
	}
	nc, err := c.dialer.DialContext(ctx, "tcp", t.Addr)
	if err != nil {
		return nil, c.classify(ctx, err)
	}
	if t.TLS {
		cfg := c.cfg.TLS.Clone()
		if cfg == nil {
			cfg = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		if cfg.ServerName == "" {
			cfg.ServerName, _, _ = net.SplitHostPort(t.Addr)
		}
		tc := tls.Client(nc, cfg)
		hctx, cancel := context.WithTimeout(ctx, c.cfg.DialTimeout)
		err := tc.HandshakeContext(hctx)
		cancel()
		if err != nil {
			_ = nc.Close()
			return nil, &net.OpError{Op: "dial", Net: "tcp", Addr: nc.RemoteAddr(), Err: err}
		}
		nc = tc
	}
	return &conn{nc: nc, br: bufio.NewReaderSize(nc, c.cfg.BufferSize), bw: bufio.NewWriterSize(nc, c.cfg.BufferSize)}, nil
}

// put returns a connection whose response was read to the end.
func (c *Client) put(addr string, cn *conn) {
	cn.idleSince = time.Now()
	c.mu.Lock()
	list := c.idle[addr]
	if len(list) < c.cfg.MaxIdlePerHost {
		c.idle[addr] = append(list, cn)
		cn = nil
	}
	c.mu.Unlock()
	if cn != nil {
		_ = cn.nc.Close()
	}
}

// CloseIdle closes the pooled connections to addr (a worker that left).
func (c *Client) CloseIdle(addr string) {
	c.mu.Lock()
	list := c.idle[addr]
	delete(c.idle, addr)
	c.mu.Unlock()
	for _, cn := range list {
		_ = cn.nc.Close()
	}
}

// Body is a response body read on the caller's goroutine. It is not safe
// for concurrent use.
type Body struct {
	client   *Client
	target   string
	cn       *conn
	rc       io.ReadCloser
	stop     func() bool
	ctx      context.Context //nolint:containedctx // the request's context, for classifying deadline errors
	timeout  time.Duration
	renewAt  time.Time // when the read deadline is next renewed
	deadline bool      // a read deadline may be set on the connection
	keep     bool      // the worker allows another request on this connection
	eof      bool
	closed   bool
}

// SetReadTimeout changes the bound on each later Read; 0 means none.
func (b *Body) SetReadTimeout(d time.Duration) {
	b.timeout = d
	b.renewAt = time.Time{}
}

// Read reads the body under the read timeout.
//
// A stream reads once per event, so the deadline is renewed only when an
// eighth of the timeout has passed since it was last set: each read is
// then bounded by between 7/8 of the timeout and the timeout, for a
// fraction of the timer updates.
func (b *Body) Read(p []byte) (int, error) {
	if b.eof {
		return 0, io.EOF
	}
	switch now := time.Now(); {
	case b.timeout > 0 && !now.Before(b.renewAt):
		_ = b.cn.nc.SetReadDeadline(now.Add(b.timeout))
		b.renewAt = now.Add(b.timeout / 8)
		b.deadline = true
	case b.timeout <= 0 && b.deadline:
		_ = b.cn.nc.SetReadDeadline(time.Time{})
		b.deadline = false
	}
	n, err := b.rc.Read(p)
	if errors.Is(err, io.EOF) {
		b.eof = true
		return n, io.EOF
	}
	if err != nil {
		return n, b.client.classify(b.ctx, err)
	}
	return n, nil
}

// Close releases the connection: back to the pool when the body was read
// to its end, closed otherwise, which is also how a worker learns that the
// client went away and stops generating.
func (b *Body) Close() error {
	if b.closed {
		return nil
	}
	b.closed = true
	// stop reports false once the context's cancellation has expired the
	// connection's deadlines: it cannot be reused then.
	live := b.stop()
	if b.eof && b.keep && live {
		_ = b.cn.nc.SetDeadline(time.Time{})
		b.client.put(b.target, b.cn)
		return nil
	}
	return b.cn.nc.Close()
}

// ParseTarget turns a worker's base URL (http://host:port[/prefix]) into a
// Target.
func ParseTarget(raw string) (Target, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return Target{}, fmt.Errorf("upstream: worker URL %q: %w", raw, err)
	}
	var t Target
	switch u.Scheme {
	case "http":
	case "https":
		t.TLS = true
	default:
		return Target{}, fmt.Errorf("upstream: worker URL %q: scheme must be http or https", raw)
	}
	if u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return Target{}, fmt.Errorf("upstream: worker URL %q: want scheme://host[:port][/path]", raw)
	}
	t.Host = u.Host
	t.Addr = u.Host
	if u.Port() == "" {
		port := "80"
		if t.TLS {
			port = "443"
		}
		t.Addr = net.JoinHostPort(u.Hostname(), port)
	}
	t.Prefix = strings.TrimSuffix(u.EscapedPath(), "/")
	return t, nil
}
