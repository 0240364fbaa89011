package zmtpguard

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
)

// python is Debian's python3, which has python3-zmq (pyzmq over libzmq):
// scripts/install-tools.sh pyzmq installs it.
const python = "/usr/bin/python3"

// libzmqPublisher connects a libzmq PUB socket to endpoint and sends
// [topic, seq] every 10 ms for 20 s: vLLM's publisher in the topology
// where workers connect to the router.
const libzmqPublisher = `
import sys, time, zmq
s = zmq.Context().socket(zmq.PUB)
s.connect(sys.argv[1])
for i in range(2000):
    s.send_multipart([b"kv", i.to_bytes(8, "big")])
    time.sleep(0.01)
`

// TestLibzmqPublisherThroughGuardedListener connects real libzmq (pyzmq) to
// a zmq4 SUB listening through the guard, behind peers that stall
// mid-greeting: libzmq's handshake (its signature first, the rest of its
// greeting once it has the listener's) must go through the read-ahead, and
// soon.
func TestLibzmqPublisherThroughGuardedListener(t *testing.T) {
	if err := exec.Command(python, "-c", "import zmq").Run(); err != nil {
		t.Fatalf("%s with python3-zmq is needed (scripts/install-tools.sh pyzmq): %v", python, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const handshake = 5 * time.Second
	sub, addr := subBehindStalledPeers(ctx, t, handshake, "kv")
	start := time.Now()
	pub := exec.CommandContext(ctx, python, "-c", libzmqPublisher, "tcp://"+addr)
	if err := pub.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pub.Process.Kill(); _ = pub.Wait() }()
	got := make(chan zmq4.Msg, 1)
	go func() {
		if msg, err := sub.Recv(); err == nil {
			got <- msg
		}
	}()
	select {
	case msg := <-got:
		if len(msg.Frames) != 2 || string(msg.Frames[0]) != "kv" || len(msg.Frames[1]) != 8 {
			t.Fatalf("received %q, want [kv, an 8-byte sequence number]", msg.Frames)
		}
		if waited := time.Since(start); waited > handshake/2 {
			t.Errorf("libzmq's first message took %v behind stalled peers", waited)
		}
	case <-time.After(4 * handshake):
		t.Fatal("no message from libzmq")
	}
}
