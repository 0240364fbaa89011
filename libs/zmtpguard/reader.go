// Package zmtpguard bounds what a ZMTP peer can make a zmq4 socket
// allocate.
//
// go-zeromq/zmq4 (v0.17.0, conn.go) allocates the size a frame header
// announces before it reads the body, with no maximum and even before the
// handshake: nine bytes announcing 1 TiB end the process. zmtpguard sits
// between the network and zmq4: it follows ZMTP 3.x framing as the bytes
// pass (the 64-byte greeting, then frames of a flags byte and a 1- or
// 8-byte size, commands included) and fails the connection when a frame or
// a multipart message would exceed its limit, before zmq4 has read the
// header that announces it. It changes no byte of a stream within limits.
//
// Register makes a guarded TCP transport zmq4 dials and listens through;
// Endpoint rewrites tcp:// endpoints to it.
package zmtpguard

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"
)

// Defaults. A vLLM KV-event batch is a few KiB (one engine step's
// BlockStored events: block hashes and their token ids), a large prefill
// some hundreds of KiB; 4 MiB leaves an order of magnitude of headroom on
// the largest. A message is [topic, seq, payload] or a replay reply of one
// more frame, so 16 MiB covers four maximal frames.
const (
	DefaultMaxFrame   = 4 << 20
	DefaultMaxMessage = 16 << 20
	// DefaultHandshakeTimeout bounds the greeting and the peer's first
	// command: how long a silent peer holds a connection (and, on a
	// listening socket, one of its pending-handshake slots).
	DefaultHandshakeTimeout = 10 * time.Second
)

// GreetingLen is the size of a ZMTP 3.x greeting.
const GreetingLen = 64

// FrameOverhead is what each frame counts toward MaxMessage beyond its
// body: zmq4 keeps a 24-byte slice header per frame, so a message of
// millions of empty frames costs memory although it carries no bytes.
const FrameOverhead = 32

// ZMTP frame flags (ZMTP 3.1, 23/ZMTP).
const (
	flagMore    = 0x01
	flagLong    = 0x02
	flagCommand = 0x04
)

// Limits bound one connection. Zero fields take the defaults.
type Limits struct {
	// MaxFrame is the largest frame body accepted, in bytes.
	MaxFrame uint64
	// MaxMessage bounds a multipart message: the sum of its frames'
	// bodies plus FrameOverhead per frame.
	MaxMessage uint64
	// HandshakeTimeout bounds the time from connecting to the peer's first
	// command (NULL's READY); negative disables it.
	HandshakeTimeout time.Duration
}

// WithDefaults returns l with zero fields set to the defaults.
func (l Limits) WithDefaults() Limits {
	if l.MaxFrame == 0 {
		l.MaxFrame = DefaultMaxFrame
	}
	if l.MaxMessage == 0 {
		l.MaxMessage = DefaultMaxMessage
	}
	if l.HandshakeTimeout == 0 {
		l.HandshakeTimeout = DefaultHandshakeTimeout
	}
	return l
}

// ErrTooLarge is wrapped by every error for a frame or message over its
// limit; ErrHandshakeTimeout by a peer too slow to complete its handshake.
var (
	ErrTooLarge         = errors.New("zmtpguard: frame or message too large")
	ErrHandshakeTimeout = errors.New("zmtpguard: handshake timed out")
)

// LimitError reports an announcement over a limit. It is a net.Error that
// is not a timeout, so zmq4 marks the connection closed.
type LimitError struct {
	// What exceeded its limit: "frame" or "message".
	What string
	// Size is the frame's announced size, or the message's size with it.
	Size, Limit uint64
	// Command is set when the frame was a ZMTP command.
	Command bool
}

func (e *LimitError) Error() string {
	kind := "message frame"
	if e.Command {
		kind = "command frame"
	}
	if e.What == "message" {
		return fmt.Sprintf("zmtpguard: a %s takes its message to %d bytes, over the %d-byte limit", kind, e.Size, e.Limit)
	}
	return fmt.Sprintf("zmtpguard: a %s announces %d bytes, over the %d-byte limit", kind, e.Size, e.Limit)
}

// Unwrap makes errors.Is(err, ErrTooLarge) hold.
func (e *LimitError) Unwrap() error { return ErrTooLarge }

// Timeout implements net.Error.
func (e *LimitError) Timeout() bool { return false }

// Temporary implements net.Error.
func (e *LimitError) Temporary() bool { return false }

// state is where the next byte falls in the ZMTP stream.
type state uint8

const (
	inGreeting state = iota
	inFlags
	inShortSize
	inLongSize
	inBody
	failed
)

// Reader passes a ZMTP 3.x byte stream through, checking every frame
// header before any of its bytes reach the caller. It is not safe for
// concurrent use (zmq4 reads a connection from one goroutine).
type Reader struct {
	r   io.Reader
	lim Limits

	st       state
	left     uint64 // greeting or body bytes still to pass
	flags    byte
	size     [8]byte
	sizeLen  int
	msg      uint64 // the current multipart message so far
	commands int    // complete command frames seen
	err      error  // sticky: a failed stream stays failed
	// firstCommandMax, when set, bounds the frames before the first
	// command is complete (a listener's read-ahead holds them).
	firstCommandMax uint64
}

// NewReader returns a Reader over r with lim (zero fields: defaults). The
// stream must start with the greeting.
func NewReader(r io.Reader, lim Limits) *Reader {
	return &Reader{r: r, lim: lim.WithDefaults(), st: inGreeting, left: GreetingLen}
}

// Read reads from the underlying reader and returns the bytes only if no
// frame header among them exceeds a limit; otherwise it returns 0 and a
// *LimitError, and every later Read returns it too. A header split across
// reads is checked when its last byte arrives, so the caller never holds a
// complete oversize header.
func (g *Reader) Read(p []byte) (int, error) {
	if g.err != nil {
		return 0, g.err
	}
	n, err := g.r.Read(p)
	if n > 0 {
		if verr := g.scan(p[:n]); verr != nil {
			g.err = verr
			return 0, verr
		}
	}
	return n, err
}

// Commands is the number of complete command frames read so far.
func (g *Reader) Commands() int { return g.commands }

// Next is how many bytes end the part of the stream the Reader is in (the
// greeting, a frame header or a frame body), at least 1: reading no more
// than that never passes the end of a frame.
func (g *Reader) Next() uint64 {
	switch g.st {
	case inGreeting, inBody:
		return max(g.left, 1)
	case inLongSize:
		return uint64(len(g.size) - g.sizeLen)
	}
	return 1
}

// scan advances the framing state over b.
func (g *Reader) scan(b []byte) error {
	for len(b) > 0 {
		switch g.st {
		case inGreeting, inBody:
			k := uint64(len(b))
			if k > g.left {
				k = g.left
			}
			b = b[k:]
			g.left -= k
			if g.left == 0 {
				g.endPart()
			}
		case inFlags:
			g.flags = b[0]
			b = b[1:]
			g.st, g.sizeLen = inShortSize, 0
			if g.flags&flagLong != 0 {
				g.st = inLongSize
			}
		case inShortSize:
			size := uint64(b[0])
			b = b[1:]
			if err := g.frame(size); err != nil {
				return err
			}
		case inLongSize:
			k := copy(g.size[g.sizeLen:], b)
			b = b[k:]
			g.sizeLen += k
			if g.sizeLen == len(g.size) {
				if err := g.frame(binary.BigEndian.Uint64(g.size[:])); err != nil {
					return err
				}
			}
		case failed:
			return g.err
		}
	}
	return nil
}

// frame checks a complete header announcing size bytes.
func (g *Reader) frame(size uint64) error {
	cmd := g.flags&flagCommand != 0
	limit := g.lim.MaxFrame
	if g.firstCommandMax > 0 && g.commands == 0 {
		limit = min(limit, g.firstCommandMax)
	}
	if size > limit {
		g.st = failed
		return &LimitError{What: "frame", Size: size, Limit: limit, Command: cmd}
	}
	// size <= MaxFrame, so the sum cannot overflow unless the limits are
	// near 2^64; saturate rather than wrap.
	total := g.msg + size + FrameOverhead
	if total < g.msg || total > g.lim.MaxMessage {
		g.st = failed
		return &LimitError{What: "message", Size: total, Limit: g.lim.MaxMessage, Command: cmd}
	}
	g.msg = total
	g.st, g.left = inBody, size
	if size == 0 {
		g.endPart()
	}
	return nil
}

// endPart moves past the greeting or a frame's body.
func (g *Reader) endPart() {
	if g.st == inBody {
		if g.flags&flagCommand != 0 {
			g.commands++
		}
		if g.flags&flagMore == 0 {
			g.msg = 0
		}
	}
	g.st = inFlags
}
