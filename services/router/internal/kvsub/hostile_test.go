package kvsub_test

import (
	"context"
	"errors"
	"io"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/warmpath/warmpath/libs/kvevents"
	"github.com/warmpath/warmpath/libs/kvevents/kvzmq"
	"github.com/warmpath/warmpath/libs/testwait"
	"github.com/warmpath/warmpath/libs/zmtpguard/zmtptest"
	"github.com/warmpath/warmpath/services/router/internal/kvsub"
	"github.com/warmpath/warmpath/services/router/kvindex"
)

// heapBound is the most the process's allocated heap, and its heap, may
// grow while a peer announces a frame of any size.
const heapBound = 64 << 20

type worker struct{ models []string }

func (w worker) Models() []string { return w.models }

// ModelsChanged is never closed: these workers' models are known from the
// start.
func (w worker) ModelsChanged() <-chan struct{} { return nil }

// strike sends a.Payload on conn and waits for the router to drop the
// connection; it fails the test if the router's heap grew past heapBound.
func strike(t *testing.T, conn net.Conn, a zmtptest.Attack) {
	t.Helper()
	// Measured from a collected heap: what earlier tests in this process
	// left is not this connection's doing.
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	if _, err := conn.Write(a.Payload); err != nil {
		t.Fatalf("send: %v", err)
	}
	// The router must hang up: read what it sends until it does.
	if err := conn.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	_, err := io.Copy(io.Discard, conn)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Errorf("the router kept a connection that announced an oversize frame")
	}
	_ = conn.Close()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	// HeapSys only grows while memory is in use, so it shows an
	// allocation the collector already freed.
	grew := int64(after.HeapSys) - int64(before.HeapSys)
	allocated := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	if allocated > heapBound || grew > heapBound {
		t.Errorf("heap: %d MiB more allocated, grew by %d MiB; want both under %d MiB",
			allocated>>20, grew>>20, heapBound>>20)
	}
}

// wantDropped waits for the guard to have counted at least n oversize
// frames.
func wantDropped(t *testing.T, m *kvsub.Manager, n int) {
	t.Helper()
	testwait.For(t, 5*time.Second, "the oversize frames to be counted", func() bool {
		return m.GuardStats().OversizeFrames >= uint64(n)
	})
}

// publishUntilApplied publishes batches through pub until the manager
// applied an event for workerURL: a connecting PUB drops what it sends
// before the subscription arrives.
func publishUntilApplied(t *testing.T, m *kvsub.Manager, pub *kvzmq.Publisher, workerURL string) {
	t.Helper()
	var h uint64
	testwait.For(t, 15*time.Second, "a well-behaved publisher's events", func() bool {
		h++
		if err := pub.Publish(batch(h)); err != nil {
			t.Fatalf("publish: %v", err)
		}
		c := m.Counters()[workerURL]
		return c != nil && c.Events.Load() > 0
	})
}

// TestHostilePeerBind connects to the router's own SUB socket (bind
// topology) and announces huge frames; the router must drop each
// connection without allocating the size, and keep taking events from a
// well-behaved worker.
func TestHostilePeerBind(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const workerURL = "http://127.0.0.1:8000"
	idx := kvindex.New(1 << 16)
	m := kvsub.New(kvsub.Config{Bind: "tcp://127.0.0.1:0"}, idx, nil)
	m.Start(ctx, workerURL, worker{models: []string{"m"}})
	listened := make(chan error, 1)
	go func() { listened <- m.Listen(ctx) }()
	testwait.For(t, 5*time.Second, "the SUB socket to listen", func() bool { return m.BindAddr() != nil })
	addr := m.BindAddr().String()

	for _, a := range zmtptest.OversizeAttacks() {
		t.Run(a.Name, func(t *testing.T) {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			strike(t, conn, a)
		})
	}
	wantDropped(t, m, len(zmtptest.OversizeAttacks()))
	select {
	case err := <-listened:
		t.Fatalf("the SUB socket stopped: %v", err)
	default:
	}

	pub, err := kvzmq.NewPublisher(ctx, kvzmq.Config{
		Endpoint: "tcp://" + addr, HWM: 1000, MaxQueueSize: 1000, Topic: workerURL,
	}, kvevents.Positional, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	publishUntilApplied(t, m, pub, workerURL)
}

// TestHostilePeerDial is a "worker" whose event socket answers the router's
// dials with huge frame announcements, then relays them to a well-behaved
// PUB socket.
func TestHostilePeerDial(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	worker1, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer worker1.Close()
	const workerURL = "http://127.0.0.1:8000"
	idx := kvindex.New(1 << 16)
	m := kvsub.New(kvsub.Config{Endpoint: "tcp://" + worker1.Addr().String(), RetryInterval: 10 * time.Millisecond}, idx, nil)
	m.Start(ctx, workerURL, worker{models: []string{"m"}})
	defer m.Stop(workerURL)

	accept := func(t *testing.T, ln net.Listener) net.Conn {
		t.Helper()
		if err := ln.(*net.TCPListener).SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
			t.Fatal(err)
		}
		conn, err := ln.Accept()
		if err != nil {
			t.Fatalf("accept: %v", err)
		}
		return conn
	}
	for _, a := range zmtptest.OversizeAttacks() {
		t.Run(a.Name, func(t *testing.T) { strike(t, accept(t, worker1), a) })
	}

	// A connection dropped during the handshake fails the dial before its
	// frame is counted by every path: the heap checks above are what
	// matters, one count shows the guard acted.
	wantDropped(t, m, 1)

	// The worker now relays every dial to a well-behaved PUB socket.
	pub := zmq4.NewPub(ctx)
	defer pub.Close()
	if err := pub.Listen("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	if err := worker1.(*net.TCPListener).SetDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	go relay(worker1, pub.Addr().String())
	var seq uint64
	testwait.For(t, 15*time.Second, "a well-behaved publisher's events", func() bool {
		payload, err := kvevents.EncodeBatch(batch(seq+1), kvevents.Positional)
		if err != nil {
			t.Fatal(err)
		}
		msg := kvevents.Message{Topic: "kv", Seq: seq, Payload: payload}
		seq++
		if err := pub.SendMulti(zmq4.NewMsgFrom(msg.Frames()...)); err != nil {
			t.Fatalf("publish: %v", err)
		}
		c := m.Counters()[workerURL]
		return c != nil && c.Events.Load() > 0
	})
}

// relay splices every connection ln accepts to a new connection to addr,
// until ln closes.
func relay(ln net.Listener, addr string) {
	for {
		in, err := ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", addr)
		if err != nil {
			_ = in.Close()
			continue
		}
		go func() { _, _ = io.Copy(out, in); _ = out.Close() }()
		go func() { _, _ = io.Copy(in, out); _ = in.Close() }()
	}
}

// batch stores one block of hash h.
func batch(h uint64) kvevents.Batch {
	return kvevents.Batch{TS: 1, Events: []kvevents.Event{kvevents.BlockStored{
		BlockHashes: []kvevents.BlockHash{kvevents.IntHash(h)}, TokenIDs: make([]uint32, 16), BlockSize: 16,
	}}}
}
