// Package resp serves the subset of RESP2 and RESP3 (after HELLO 3) that
// LMCache's redis:// and valkey:// connectors (the latter through
// valkey-glide), redis-cli, redis-benchmark and go-redis use, over the
// cache server's store.
//
// The parser is this package's own rather than a library's (redcon, the
// usual choice, grows its buffer to whatever a client announces and copies
// every command): a value is read straight into its own slice, which the
// store then keeps, an argument longer than the configured maximum is
// refused from its length prefix, before any of it is buffered, and one
// within it is buffered only as its bytes arrive.
package resp

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/warmpath/warmpath/libs/lmproto"
)

// ErrProtocol wraps malformed input: the connection must be closed.
var ErrProtocol = errors.New("resp: protocol error")

// Limits bound what one command may carry.
type Limits struct {
	// MaxArgs is the most arguments in one command (MGET's keys).
	MaxArgs int
	// MaxArgBytes is the longest argument (a SET value).
	MaxArgBytes int
	// MaxInline is the longest inline command line (redis-cli's, telnet's).
	MaxInline int
}

// PreAuthLimits bound a connection that has not authenticated yet, as
// Redis bounds one since CVE-2021-32675: 10 arguments, 16 KiB each. AUTH
// fits; a stranger cannot make the server buffer more than that.
var PreAuthLimits = Limits{MaxArgs: 10, MaxArgBytes: 16 << 10, MaxInline: 16 << 10}

func (l Limits) withDefaults() Limits {
	if l.MaxArgs <= 0 {
		l.MaxArgs = 1 << 16
	}
	if l.MaxArgBytes <= 0 {
		l.MaxArgBytes = 512 << 20
	}
	if l.MaxInline <= 0 {
		l.MaxInline = 64 << 10
	}
	return l
}

// Reader reads commands.
type Reader struct {
	br  *bufio.Reader
	lim Limits
}

// NewReader returns a reader over br.
func NewReader(br *bufio.Reader, lim Limits) *Reader {
	return &Reader{br: br, lim: lim.withDefaults()}
}

// SetLimits replaces the limits from the next command on (after AUTH).
func (r *Reader) SetLimits(lim Limits) { r.lim = lim.withDefaults() }

// Next reads one command: a RESP array of bulk strings, or an inline line.
// It returns io.EOF at a clean end between commands. Each argument is a
// fresh slice the caller may keep.
func (r *Reader) Next() ([][]byte, error) {
	for {
		c, err := r.br.ReadByte()
		if err != nil {
			return nil, err
		}
		if c == '*' {
			return r.array()
		}
		_ = r.br.UnreadByte()
		args, err := r.inline()
		if err != nil || len(args) > 0 {
			return args, err
		}
		// An empty line: redis ignores it.
	}
}

func (r *Reader) array() ([][]byte, error) {
	n, err := r.number()
	if err != nil {
		return nil, err
	}
	if n < 1 || n > r.lim.MaxArgs {
		return nil, fmt.Errorf("%w: command of %d arguments (limit %d)", ErrProtocol, n, r.lim.MaxArgs)
	}
	args := make([][]byte, 0, min(n, 64))
	for range n {
		c, err := r.br.ReadByte()
		if err != nil {
			return nil, truncated(err)
		}
		if c != '$' {
			return nil, fmt.Errorf("%w: expected '$', got %q", ErrProtocol, c)
		}
		size, err := r.number()
		if err != nil {
			return nil, err
		}
		if size < 0 || size > r.lim.MaxArgBytes {
			return nil, fmt.Errorf("%w: argument of %d bytes (limit %d)", ErrProtocol, size, r.lim.MaxArgBytes)
		}
		// Not make(size): the buffer grows as the bytes arrive, so a
		// length prefix alone cannot make the server allocate the limit.
		// The value alone, not with its CRLF: a value of exactly the
		// reader's first step (4 MiB, LMCache's usual chunk) then fits it,
		// instead of costing a second buffer and a copy for two bytes.
		arg, err := lmproto.ReadValue(r.br, size)
		if err != nil {
			return nil, truncated(err)
		}
		cr, err1 := r.br.ReadByte()
		lf, err2 := r.br.ReadByte()
		if err := errors.Join(err1, err2); err != nil {
			return nil, truncated(err)
		}
		if cr != '\r' || lf != '\n' {
			return nil, fmt.Errorf("%w: bulk string not terminated by CRLF", ErrProtocol)
		}
		args = append(args, arg)
	}
	return args, nil
}

// number reads an integer line ending in CRLF.
func (r *Reader) number() (int, error) {
	line, err := r.line(32)
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(string(line))
	if err != nil {
		return 0, fmt.Errorf("%w: bad length %q", ErrProtocol, line)
	}
	return n, nil
}

// line reads up to CRLF, at most max bytes.
func (r *Reader) line(limit int) ([]byte, error) {
	var out []byte
	for {
		frag, err := r.br.ReadSlice('\n')
		out = append(out, frag...)
		if len(out) > limit+2 {
			return nil, fmt.Errorf("%w: line longer than %d bytes", ErrProtocol, limit)
		}
		if err == nil {
			break
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return nil, truncated(err)
		}
	}
	if len(out) < 2 || out[len(out)-2] != '\r' {
		return nil, fmt.Errorf("%w: line not terminated by CRLF", ErrProtocol)
	}
	return out[:len(out)-2], nil
}

// inline reads a space-separated command line (no quoting).
func (r *Reader) inline() ([][]byte, error) {
	var out []byte
	for {
		frag, err := r.br.ReadSlice('\n')
		out = append(out, frag...)
		if len(out) > r.lim.MaxInline {
			return nil, fmt.Errorf("%w: inline command longer than %d bytes", ErrProtocol, r.lim.MaxInline)
		}
		if err == nil {
			break
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			if errors.Is(err, io.EOF) && len(out) == 0 {
				return nil, io.EOF
			}
			return nil, truncated(err)
		}
	}
	var args [][]byte
	start := -1
	for i, c := range out {
		sep := c == ' ' || c == '\t' || c == '\r' || c == '\n'
		switch {
		case !sep && start < 0:
			start = i
		case sep && start >= 0:
			args = append(args, append([]byte(nil), out[start:i]...))
			start = -1
		}
	}
	if len(args) > r.lim.MaxArgs {
		return nil, fmt.Errorf("%w: too many arguments", ErrProtocol)
	}
	return args, nil
}

func truncated(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: truncated command", ErrProtocol)
	}
	return err
}
