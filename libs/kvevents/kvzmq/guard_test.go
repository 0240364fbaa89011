package kvzmq

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/warmpath/warmpath/libs/kvevents"
)

// TestReplaySocketDropsOversizeFrames announces a 1 TiB frame to a
// publisher's replay socket, before and after the handshake: the socket
// drops the connection without allocating it and still answers replays.
func TestReplaySocketDropsOversizeFrames(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := DefaultConfig()
	cfg.Endpoint = "tcp://127.0.0.1:0" // connects: nothing listens, nothing needed
	cfg.ReplayEndpoint = "tcp://127.0.0.1:0"
	cfg.Topic = testTopic
	p, err := NewPublisher(ctx, cfg, kvevents.Positional, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.Publish(testBatch(0)); err != nil {
		t.Fatal(err)
	}
	greeting := make([]byte, 64)
	greeting[0], greeting[9], greeting[10] = 0xFF, 0x7F, 3
	copy(greeting[12:32], "NULL")
	ready := []byte("\x04\x1c\x05READY\x0bSocket-Type\x00\x00\x00\x06DEALER")
	huge := binary.BigEndian.AppendUint64([]byte{0x02}, 1<<40)
	for _, tc := range []struct {
		name    string
		payload []byte
	}{
		{"before handshake", append(append([]byte{}, greeting...), append([]byte{0x04 | 0x02}, huge[1:]...)...)},
		{"after handshake", append(append(append([]byte{}, greeting...), ready...), huge...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", p.ReplayAddr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := conn.Write(tc.payload); err != nil {
				t.Fatal(err)
			}
			if err := conn.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
				t.Fatal(err)
			}
			_, err = io.Copy(io.Discard, conn)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatal("the replay socket kept the connection")
			}
		})
	}
	msgs, err := Replay(ctx, "tcp://"+p.ReplayAddr().String(), 0)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("Replay after the attacks: %d messages, %v; want 1", len(msgs), err)
	}
}
