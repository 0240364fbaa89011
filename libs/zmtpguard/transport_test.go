package zmtpguard

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
)

// deadlineConn records the read deadlines set on it.
type deadlineConn struct {
	net.Conn
	mu        sync.Mutex
	deadlines []time.Time
}

func (c *deadlineConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadlines = append(c.deadlines, t)
	c.mu.Unlock()
	return c.Conn.SetReadDeadline(t)
}

func TestConnHandshakeDeadline(t *testing.T) {
	tests := []struct {
		name string
		// send is what the peer sends before going silent.
		send        []byte
		wantTimeout bool
	}{
		{"silent peer", nil, true},
		{"greeting only", greeting(), true},
		{"greeting and READY", cat(greeting(), ready), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			local, peer := net.Pipe()
			defer peer.Close()
			dc := &deadlineConn{Conn: local}
			reported := make(chan Rejection, 1)
			c := NewConn(dc, Limits{HandshakeTimeout: 50 * time.Millisecond}, func(r Rejection) { reported <- r })
			defer c.Close()
			if len(tc.send) > 0 {
				go func() { _, _ = peer.Write(tc.send) }()
			}
			buf := make([]byte, len(tc.send))
			if _, err := io.ReadFull(c, buf); err != nil {
				t.Fatalf("reading what the peer sent: %v", err)
			}
			if !tc.wantTimeout {
				dc.mu.Lock()
				defer dc.mu.Unlock()
				if n := len(dc.deadlines); n != 2 || !dc.deadlines[1].IsZero() {
					t.Fatalf("deadlines %v; want one set, then cleared after READY", dc.deadlines)
				}
				return
			}
			_, err := c.Read(make([]byte, 1))
			if !errors.Is(err, ErrHandshakeTimeout) {
				t.Fatalf("err = %v; want ErrHandshakeTimeout", err)
			}
			var ne net.Error
			if !errors.As(err, &ne) || ne.Timeout() {
				t.Fatalf("err %v should be a net.Error that is not a timeout (zmq4 then closes the connection)", err)
			}
			if r := <-reported; !errors.Is(r.Err, ErrHandshakeTimeout) {
				t.Fatalf("reported %v", r.Err)
			}
			// The guard closed the connection: the peer sees it.
			if _, err := peer.Write([]byte{0}); err == nil {
				t.Fatalf("the connection is still open")
			}
		})
	}
}

// TestTransport runs a real zmq4 PUB and SUB through a registered guarded
// transport: messages within limits pass, and a frame over the limit
// drops the connection and is reported.
func TestTransport(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reported := make(chan Rejection, 4)
	scheme, err := Register(Limits{MaxFrame: 1024}, func(r Rejection) { reported <- r })
	if err != nil {
		t.Fatal(err)
	}
	if got := Endpoint(scheme, "ipc:///x"); got != "ipc:///x" {
		t.Errorf("Endpoint rewrote a non-TCP endpoint: %s", got)
	}
	sub := zmq4.NewSub(ctx)
	defer sub.Close()
	if err := sub.SetOption(zmq4.OptionSubscribe, ""); err != nil {
		t.Fatal(err)
	}
	if err := sub.Listen(Endpoint(scheme, "tcp://127.0.0.1:0")); err != nil {
		t.Fatal(err)
	}
	pub := zmq4.NewPub(ctx)
	defer pub.Close()
	if err := pub.Dial("tcp://" + sub.Addr().String()); err != nil {
		t.Fatal(err)
	}
	// The PUB drops messages until the subscription arrives: send until
	// one is received.
	got := make(chan zmq4.Msg, 1)
	go func() {
		msg, err := sub.Recv()
		if err == nil {
			got <- msg
		}
	}()
	deadline := time.After(10 * time.Second)
	ticker := time.NewTicker(10 * time.Millisecond)
	defer ticker.Stop()
	var msg zmq4.Msg
wait:
	for {
		select {
		case msg = <-got:
			break wait
		case <-ticker.C:
			if err := pub.SendMulti(zmq4.NewMsgFrom([]byte("topic"), make([]byte, 1000))); err != nil {
				t.Fatal(err)
			}
		case <-deadline:
			t.Fatal("no message received")
		}
	}
	if len(msg.Frames) != 2 || len(msg.Frames[1]) != 1000 {
		t.Fatalf("received %d frames", len(msg.Frames))
	}
	if err := pub.SendMulti(zmq4.NewMsgFrom([]byte("topic"), make([]byte, 2000))); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-reported:
		var le *LimitError
		if !errors.As(r.Err, &le) || le.Size != 2000 || le.Limit != 1024 {
			t.Fatalf("reported %v; want a 2000-byte frame over 1024", r.Err)
		}
		if r.Peer == nil {
			t.Fatal("no peer address reported")
		}
	case <-deadline:
		t.Fatal("the oversize frame was not reported")
	}
}

// TestListenerAcceptsPastStalledPeers: zmq4 opens accepted connections one
// at a time, so peers that stall mid-greeting used to keep a listening
// socket from taking anyone else for a handshake timeout each. The guarded
// listener hands zmq4 only connections whose handshake has arrived.
func TestListenerAcceptsPastStalledPeers(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const handshake = 5 * time.Second
	sub, addr := subBehindStalledPeers(ctx, t, handshake, "")
	start := time.Now()
	pub := zmq4.NewPub(ctx)
	defer pub.Close()
	// Dial returns once the handshake is done: behind the stalled peers,
	// only when their handshakes time out.
	if err := pub.Dial("tcp://" + addr); err != nil {
		t.Fatal(err)
	}
	got := make(chan struct{})
	go func() {
		if _, err := sub.Recv(); err == nil {
			close(got)
		}
	}()
	ticker := time.NewTicker(10 * time.Millisecond)
	defer ticker.Stop()
	for {
		select {
		case <-got:
			if waited := time.Since(start); waited > handshake/2 {
				t.Fatalf("a well-behaved publisher waited %v behind stalled peers", waited)
			}
			return
		case <-ticker.C:
			if err := pub.Send(zmq4.NewMsgString("m")); err != nil {
				t.Fatal(err)
			}
		case <-time.After(4 * handshake):
			t.Fatal("no message from the well-behaved publisher")
		}
	}
}

// TestListenerReadAheadBounds: what the listener reads ahead of zmq4 is
// bounded in time and in bytes, and whatever it refuses is reported.
func TestListenerReadAheadBounds(t *testing.T) {
	const handshake = 300 * time.Millisecond
	tests := []struct {
		name string
		send []byte
		want error
	}{
		{"first command over the read-ahead bound", cat(greeting(), []byte{flagCommand | flagLong, 0, 0, 0, 0, 0, 0x10, 0, 0}), ErrTooLarge},
		{"first command's body stalled", cat(greeting(), []byte{flagCommand, 100}, make([]byte, 10)), ErrHandshakeTimeout},
		{"greeting stalled", greeting()[:10], ErrHandshakeTimeout},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			reported := make(chan Rejection, 1)
			scheme, err := Register(Limits{HandshakeTimeout: handshake}, func(r Rejection) { reported <- r })
			if err != nil {
				t.Fatal(err)
			}
			sub := zmq4.NewSub(ctx)
			defer sub.Close()
			if err := sub.Listen(Endpoint(scheme, "tcp://127.0.0.1:0")); err != nil {
				t.Fatal(err)
			}
			c, err := net.Dial("tcp", sub.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := c.Write(tc.send); err != nil {
				t.Fatal(err)
			}
			select {
			case r := <-reported:
				if !errors.Is(r.Err, tc.want) {
					t.Fatalf("reported %v, want %v", r.Err, tc.want)
				}
			case <-time.After(10 * handshake):
				t.Fatal("nothing reported")
			}
			// The listener hung up.
			if err := c.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
				t.Fatal(err)
			}
			_, err = io.Copy(io.Discard, c)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatal("the listener kept the connection")
			}
		})
	}
}

// subBehindStalledPeers returns a zmq4 SUB subscribed to prefix, listening
// through a guard of handshake timeout handshake, and its address, once
// three peers have connected to it and stalled mid-greeting.
func subBehindStalledPeers(ctx context.Context, t *testing.T, handshake time.Duration, prefix string) (zmq4.Socket, string) {
	t.Helper()
	scheme, err := Register(Limits{HandshakeTimeout: handshake}, nil)
	if err != nil {
		t.Fatal(err)
	}
	sub := zmq4.NewSub(ctx)
	t.Cleanup(func() { _ = sub.Close() })
	if err := sub.SetOption(zmq4.OptionSubscribe, prefix); err != nil {
		t.Fatal(err)
	}
	if err := sub.Listen(Endpoint(scheme, "tcp://127.0.0.1:0")); err != nil {
		t.Fatal(err)
	}
	addr := sub.Addr().String()
	for range 3 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		if _, err := c.Write(greeting()[:10]); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(100 * time.Millisecond) // the stalled peers are accepted first
	return sub, addr
}
