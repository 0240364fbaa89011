package lmproto

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// ErrMiss is returned by Get for a key the server does not hold.
var ErrMiss = errors.New("lmproto: miss")

// Client speaks lm:// over one connection, as an LMCache worker does.
// Calls are serialised (the protocol has no request ids). Every call has a
// deadline; after any error the connection is closed and the next call
// dials again.
type Client struct {
	addr    string
	timeout time.Duration
	maxVal  int

	mu   sync.Mutex
	conn net.Conn
	br   *bufio.Reader
	bw   *bufio.Writer
	buf  []byte
}

// Dial returns a client for addr (host:port); it connects on first use.
// timeout bounds each call (5s when <= 0); maxValue bounds a GET's value
// (DefaultMaxValueLen when <= 0).
func Dial(addr string, timeout time.Duration, maxValue int) *Client {
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	if maxValue <= 0 {
		maxValue = DefaultMaxValueLen
	}
	return &Client{addr: addr, timeout: timeout, maxVal: maxValue}
}

// Close closes the connection.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.drop()
}

func (c *Client) drop() error {
	if c.conn == nil {
		return nil
	}
	err := c.conn.Close()
	c.conn = nil
	return err
}

func (c *Client) ensure(ctx context.Context) error {
	if c.conn != nil {
		return nil
	}
	d := net.Dialer{Timeout: c.timeout}
	conn, err := d.DialContext(ctx, "tcp", c.addr)
	if err != nil {
		return fmt.Errorf("lmproto: dial %s: %w", c.addr, err)
	}
	c.conn, c.br, c.bw = conn, bufio.NewReaderSize(conn, 64<<10), bufio.NewWriterSize(conn, 64<<10)
	return nil
}

// do runs one exchange under the deadline, dropping the connection on
// error.
func (c *Client) do(ctx context.Context, f func() error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.ensure(ctx); err != nil {
		return err
	}
	deadline := time.Now().Add(c.timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = c.conn.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = c.conn.SetDeadline(time.Unix(1, 0)) })
	err := f()
	stop()
	if err != nil && !errors.Is(err, ErrMiss) {
		_ = c.drop()
	}
	return err
}

func (c *Client) send(h *RequestHeader, value []byte) error {
	var err error
	if c.buf, err = AppendRequest(c.buf[:0], h); err != nil {
		return err
	}
	if _, err := c.bw.Write(c.buf); err != nil {
		return fmt.Errorf("lmproto: write: %w", err)
	}
	if _, err := c.bw.Write(value); err != nil {
		return fmt.Errorf("lmproto: write: %w", err)
	}
	if err := c.bw.Flush(); err != nil {
		return fmt.Errorf("lmproto: write: %w", err)
	}
	return nil
}

func (c *Client) reply() (ReplyHeader, error) {
	var b [ReplyHeaderSize]byte
	if _, err := io.ReadFull(c.br, b[:]); err != nil {
		return ReplyHeader{}, fmt.Errorf("lmproto: read reply: %w", err)
	}
	return ParseReply(b[:])
}

// Put stores value under key with its metadata (Length is set from value).
// The protocol sends no reply: a nil error means the bytes were written.
func (c *Client) Put(ctx context.Context, key string, meta Meta, value []byte) error {
	meta.Length = int32(len(value))
	h := &RequestHeader{Command: CmdPut, Meta: meta, Key: key}
	return c.do(ctx, func() error { return c.send(h, value) })
}

// Get returns the value and metadata stored under key, or ErrMiss.
func (c *Client) Get(ctx context.Context, key string) ([]byte, Meta, error) {
	return c.GetInto(ctx, key, nil)
}

// GetInto is Get reading the value into buf when it has the capacity (a
// caller fetching many equal-sized chunks reuses one buffer, as LMCache
// reads into a preallocated tensor); the value returned aliases buf then.
func (c *Client) GetInto(ctx context.Context, key string, buf []byte) ([]byte, Meta, error) {
	var val []byte
	var meta Meta
	err := c.do(ctx, func() error {
		if err := c.send(&RequestHeader{Command: CmdGet, Key: key}, nil); err != nil {
			return err
		}
		r, err := c.reply()
		if err != nil {
			return err
		}
		if r.Code != CodeSuccess {
			return ErrMiss
		}
		if r.Length < 0 || int(r.Length) > c.maxVal {
			return fmt.Errorf("%w: GET reply of %d bytes (limit %d)", ErrProtocol, r.Length, c.maxVal)
		}
		if int(r.Length) <= cap(buf) {
			val = buf[:r.Length]
			_, err = io.ReadFull(c.br, val)
		} else {
			val, err = ReadValue(c.br, int(r.Length))
		}
		if err != nil {
			return fmt.Errorf("lmproto: read value: %w", err)
		}
		meta = r.Meta
		return nil
	})
	return val, meta, err
}

// Exist reports whether the server holds key.
func (c *Client) Exist(ctx context.Context, key string) (bool, error) {
	var ok bool
	err := c.do(ctx, func() error {
		if err := c.send(&RequestHeader{Command: CmdExist, Key: key}, nil); err != nil {
			return err
		}
		r, err := c.reply()
		ok = r.Code == CodeSuccess
		return err
	})
	return ok, err
}

// Delete removes key (a warmpath server's extension, for forwarding
// between cluster nodes) and reports whether it was there.
func (c *Client) Delete(ctx context.Context, key string) (bool, error) {
	var ok bool
	err := c.do(ctx, func() error {
		if err := c.send(&RequestHeader{Command: CmdDelete, Key: key}, nil); err != nil {
			return err
		}
		r, err := c.reply()
		ok = r.Code == CodeSuccess
		return err
	})
	return ok, err
}

// Health asks the server whether it is up.
func (c *Client) Health(ctx context.Context) error {
	return c.do(ctx, func() error {
		if err := c.send(&RequestHeader{Command: CmdHealth, Key: "health"}, nil); err != nil {
			return err
		}
		r, err := c.reply()
		if err == nil && r.Code != CodeSuccess {
			err = fmt.Errorf("lmproto: health: code %d", r.Code)
		}
		return err
	})
}
