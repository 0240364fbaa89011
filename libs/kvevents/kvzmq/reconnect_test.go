package kvzmq

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/warmpath/warmpath/libs/kvevents"
)

// relay forwards TCP connections to target. cut closes its listener first and
// then every connection, as when the subscriber's process dies, so the
// publisher's redials are refused until a new relay listens on the address.
type relay struct {
	ln     net.Listener
	mu     sync.Mutex
	conns  []net.Conn
	target string
}

func startRelay(t *testing.T, addr, target string) *relay {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("relay listen: %v", err)
	}
	r := &relay{ln: ln, target: target}
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			r.mu.Lock()
			r.conns = append(r.conns, in, out)
			r.mu.Unlock()
			go func() { _, _ = io.Copy(out, in); out.Close() }()
			go func() { _, _ = io.Copy(in, out); in.Close() }()
		}
	}()
	return r
}

func (r *relay) cut() {
	r.ln.Close()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.conns {
		c.Close()
	}
}

// listenSub returns a SUB socket subscribed to everything, listening at addr,
// and the messages it receives.
func listenSub(t *testing.T, ctx context.Context, addr string) (zmq4.Socket, <-chan kvevents.Message) {
	t.Helper()
	sub := zmq4.NewSub(ctx, quietZMQ())
	if err := sub.SetOption(zmq4.OptionSubscribe, ""); err != nil {
		t.Fatal(err)
	}
	if err := sub.Listen("tcp://" + addr); err != nil {
		t.Fatalf("Listen: %v", err)
	}
	msgs := make(chan kvevents.Message, 1000)
	go func() {
		for {
			msg, err := sub.Recv()
			if errors.Is(err, io.EOF) {
				continue // a peer went away; the socket lives on
			}
			if err != nil {
				return
			}
			if m, err := kvevents.ParseMessage(msg.Frames); err == nil {
				msgs <- m
			}
		}
	}()
	return sub, msgs
}

// publishUntilReceived publishes testBatch(*next), testBatch(*next+1), ...
// until one arrives on msgs, and checks it.
func publishUntilReceived(t *testing.T, p *Publisher, msgs <-chan kvevents.Message, next *int) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		if err := p.Publish(testBatch(*next)); err != nil {
			t.Fatal(err)
		}
		*next++
		select {
		case m := <-msgs:
			checkMessages(t, []kvevents.Message{m}, int(m.Seq), 1)
			return
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			t.Fatal("no message received")
		}
	}
}

func connectingPublisher(t *testing.T, ctx context.Context, addr string) *Publisher {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Endpoint = "tcp://" + addr
	cfg.Topic = testTopic
	p, err := NewPublisher(ctx, cfg, kvevents.Positional, testLogger(t))
	if err != nil {
		t.Fatalf("NewPublisher: %v", err)
	}
	return p
}

// TestPublisherReconnectsAfterLinkCut: the subscriber's process dies and
// comes back on the same address (kernel closes listener and connections).
func TestPublisherReconnectsAfterLinkCut(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sub, msgs := listenSub(t, ctx, "127.0.0.1:0")
	defer sub.Close()
	link := startRelay(t, "127.0.0.1:0", sub.Addr().String())
	addr := link.ln.Addr().String()
	p := connectingPublisher(t, ctx, addr)
	defer p.Close()
	next := 0
	publishUntilReceived(t, p, msgs, &next)

	link.cut()
	// The subscriber stays away a while (its port refusing the publisher's
	// redials): a downtime under test, not a wait for something to happen.
	time.Sleep(100 * time.Millisecond)
	link = startRelay(t, addr, sub.Addr().String())
	defer link.cut()
	for len(msgs) > 0 {
		<-msgs
	}
	publishUntilReceived(t, p, msgs, &next)
}

// TestPublisherReconnectsAfterSocketReopen: the subscriber closes its zmq4
// socket and listens again on the same address in the same process. zmq4
// closes connections before its listener, so the first redial may complete
// a handshake with the dying socket; the publisher must notice and redial.
func TestPublisherReconnectsAfterSocketReopen(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	first, msgs := listenSub(t, ctx, "127.0.0.1:0")
	addr := first.Addr().String()
	p := connectingPublisher(t, ctx, addr)
	defer p.Close()
	next := 0
	publishUntilReceived(t, p, msgs, &next)

	first.Close()
	second, msgs := listenSub(t, ctx, addr)
	defer second.Close()
	publishUntilReceived(t, p, msgs, &next)
}
