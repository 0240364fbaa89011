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
