package zmtpguard

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/go-zeromq/zmq4/transport"
)

// fuzzLimits are small so that fuzzed sizes reach them.
var fuzzLimits = Limits{MaxFrame: 512, MaxMessage: 2048}

// FuzzZMTPGuard feeds arbitrary bytes (seeded with a real zmq4 stream)
// through the guard, split into reads of arbitrary size, to a consumer
// that reads frames as zmq4 does. The consumer must never be handed a
// header over a limit (zmq4 would allocate it); the guard must pass
// through every byte of a stream within limits unchanged, fail exactly the
// streams that break one, and never panic.
func FuzzZMTPGuard(f *testing.F) {
	f.Add(captureZMQ4(f), uint8(0))
	f.Add(captureZMQ4(f), uint8(7))
	f.Add(cat(greeting(), ready, header(0, 1<<40)), uint8(3))
	f.Add(cat(greeting(), ready, bytes.Repeat(frame(flagMore, nil), 70)), uint8(1))
	f.Fuzz(func(t *testing.T, data []byte, chunk uint8) {
		g := NewReader(&chunked{data: data, n: int(chunk) + 1}, fuzzLimits)
		var out bytes.Buffer
		consumeErr := consume(io.TeeReader(g, &out), fuzzLimits)
		if consumeErr != nil {
			t.Fatal(consumeErr)
		}
		// Drain what the consumer left (a stream ending mid-frame).
		_, gErr := io.Copy(&out, g)
		if !bytes.Equal(out.Bytes(), data[:out.Len()]) {
			t.Fatal("the guard changed the bytes it passed")
		}
		end, bad := firstViolation(data, fuzzLimits)
		switch {
		case bad && !errors.Is(gErr, ErrTooLarge):
			t.Fatalf("the stream breaks a limit at byte %d, the guard passed it (err %v)", end, gErr)
		case !bad && gErr != nil:
			t.Fatalf("the guard failed a stream within limits: %v", gErr)
		case !bad && out.Len() != len(data):
			t.Fatalf("passed %d of %d bytes", out.Len(), len(data))
		case bad && out.Len() >= end:
			t.Fatalf("passed %d bytes, including the offending header ending at %d", out.Len(), end)
		}
	})
}

// chunked returns data in reads of at most n bytes.
type chunked struct {
	data []byte
	n    int
}

func (c *chunked) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	k := copy(p[:min(len(p), c.n)], c.data)
	c.data = c.data[k:]
	return k, nil
}

// consume reads r as zmq4's Conn.read does (io.ReadFull of the greeting,
// each header, each body) and reports a header that would have made it
// allocate beyond lim. It stops at the first read error.
func consume(r io.Reader, lim Limits) error {
	lim = lim.WithDefaults()
	if !readFull(r, make([]byte, GreetingLen)) {
		return nil
	}
	var msg uint64
	for {
		var hdr [9]byte
		if !readFull(r, hdr[:2]) {
			return nil
		}
		size := uint64(hdr[1])
		if hdr[0]&flagLong != 0 {
			if !readFull(r, hdr[2:]) {
				return nil
			}
			size = binary.BigEndian.Uint64(hdr[1:])
		}
		// Here zmq4 calls make([]byte, size).
		if size > lim.MaxFrame || msg+size+FrameOverhead > lim.MaxMessage {
			return fmt.Errorf("the consumer was handed a header announcing %d bytes (message so far %d)", size, msg)
		}
		msg += size + FrameOverhead
		if hdr[0]&flagMore == 0 {
			msg = 0
		}
		if n, _ := io.CopyN(io.Discard, r, int64(size)); n < int64(size) {
			return nil
		}
	}
}

// readFull reports whether r filled p; the stream's end or the guard's
// error ends the consumer alike.
func readFull(r io.Reader, p []byte) bool {
	n, _ := io.ReadFull(r, p)
	return n == len(p)
}

// firstViolation is an independent reading of data: the end offset of the
// first frame header that breaks lim, if any.
func firstViolation(data []byte, lim Limits) (int, bool) {
	lim = lim.WithDefaults()
	i := GreetingLen
	var msg uint64
	for i < len(data) {
		flags := data[i]
		i++
		var size uint64
		if flags&flagLong != 0 {
			if i+8 > len(data) {
				return 0, false
			}
			size = binary.BigEndian.Uint64(data[i:])
			i += 8
		} else {
			if i >= len(data) {
				return 0, false
			}
			size = uint64(data[i])
			i++
		}
		if size > lim.MaxFrame || msg+size+FrameOverhead > lim.MaxMessage {
			return i, true
		}
		msg += size + FrameOverhead
		if flags&flagMore == 0 {
			msg = 0
		}
		if size > uint64(len(data)-i) {
			return 0, false
		}
		i += int(size)
	}
	return 0, false
}

// captureZMQ4 records what a real zmq4 PUB sends a SUB: greeting, READY,
// and messages of short, long (over 255 bytes) and empty frames.
func captureZMQ4(tb testing.TB) []byte {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rec := &recorder{}
	scheme := fmt.Sprintf("zmtpguard-record-%d", schemes.Add(1))
	if err := zmq4.RegisterTransport(scheme, rec); err != nil {
		tb.Fatal(err)
	}
	sub := zmq4.NewSub(ctx)
	defer sub.Close()
	if err := sub.SetOption(zmq4.OptionSubscribe, ""); err != nil {
		tb.Fatal(err)
	}
	if err := sub.Listen(scheme + "://127.0.0.1:0"); err != nil {
		tb.Fatal(err)
	}
	pub := zmq4.NewPub(ctx)
	defer pub.Close()
	if err := pub.Dial("tcp://" + sub.Addr().String()); err != nil {
		tb.Fatal(err)
	}
	msgs := [][][]byte{
		{[]byte("kv@127.0.0.1:8000@m"), make([]byte, 8), bytes.Repeat([]byte{0x93}, 40)},
		{[]byte("kv@127.0.0.1:8000@m"), make([]byte, 8), bytes.Repeat([]byte{0x94}, 300)},
		{[]byte{}, make([]byte, 8), []byte{}},
	}
	// The PUB drops what it sends before the subscription arrives: send
	// until the SUB has received every kind of message.
	received := make(chan int, 64)
	go func() {
		for {
			msg, err := sub.Recv()
			if err != nil {
				return
			}
			received <- len(msg.Frames[len(msg.Frames)-1])
		}
	}()
	seen := map[int]bool{}
	deadline := time.After(10 * time.Second)
	ticker := time.NewTicker(10 * time.Millisecond)
	defer ticker.Stop()
	for len(seen) < len(msgs) {
		select {
		case <-ticker.C:
			for _, m := range msgs {
				if err := pub.SendMulti(zmq4.NewMsgFrom(m...)); err != nil {
					tb.Fatal(err)
				}
			}
		case n := <-received:
			seen[n] = true
		case <-deadline:
			tb.Fatal("the SUB received nothing from the PUB")
		}
	}
	return rec.bytes()
}

// recorder is a TCP transport that records the bytes its listener's
// connections read.
type recorder struct {
	mu  *sync.Mutex
	buf *bytes.Buffer
}

func (r *recorder) bytes() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return bytes.Clone(r.buf.Bytes())
}

func (r *recorder) Dial(ctx context.Context, d transport.Dialer, addr string) (net.Conn, error) {
	return d.DialContext(ctx, "tcp", addr) //nolint:wrapcheck // test transport
}

func (r *recorder) Listen(_ context.Context, addr string) (net.Listener, error) {
	if r.mu == nil {
		r.mu, r.buf = &sync.Mutex{}, &bytes.Buffer{}
	}
	ln, err := net.Listen("tcp", addr)
	return recListener{Listener: ln, r: r}, err //nolint:wrapcheck // test transport
}

func (r *recorder) Addr(ep string) (string, error) {
	return transport.New("tcp").Addr(ep) //nolint:wrapcheck // test transport
}

type recListener struct {
	net.Listener
	r *recorder
}

func (l recListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err //nolint:wrapcheck // test transport
	}
	return recConn{Conn: c, r: l.r}, nil
}

type recConn struct {
	net.Conn
	r *recorder
}

func (c recConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.r.mu.Lock()
	c.r.buf.Write(p[:n])
	c.r.mu.Unlock()
	return n, err //nolint:wrapcheck // test transport
}

// FuzzReadAhead feeds a listener's read-ahead whatever a peer may send
// first: it must end (the peer hangs up after sending), and what it keeps
// for zmq4 must be exactly the peer's greeting and one whole first command,
// never more than the bounds allow.
func FuzzReadAhead(f *testing.F) {
	f.Add(cat(greeting(), ready))
	f.Add(cat(greeting(), header(flagCommand, 1<<40)))
	f.Add(cat(greeting(), frame(flagCommand, bytes.Repeat([]byte{'x'}, 300))))
	f.Add(greeting()[:10])
	f.Fuzz(func(t *testing.T, in []byte) {
		local, peer := net.Pipe()
		c := NewConn(local, Limits{MaxFrame: 1 << 20}, nil)
		defer c.Close()
		go func() {
			defer peer.Close()
			if _, err := io.ReadFull(peer, make([]byte, GreetingLen)); err != nil {
				return
			}
			_, _ = peer.Write(in)
		}()
		if err := c.readAhead(); err != nil {
			return
		}
		if len(c.ahead) < GreetingLen+2 || len(c.ahead) > GreetingLen+9+maxFirstCommand || len(c.ahead) > len(in) {
			t.Fatalf("read ahead %d bytes of %d sent", len(c.ahead), len(in))
		}
		if !bytes.Equal(c.ahead, in[:len(c.ahead)]) {
			t.Fatal("what was read ahead is not what the peer sent")
		}
	})
}
