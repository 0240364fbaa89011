package kvzmq

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log"
	"log/slog"
	"net"
	"reflect"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/warmpath/warmpath/libs/kvevents"
)

const testTopic = "kv@pod-0@llama"

func testBatch(i int) kvevents.Batch {
	return kvevents.Batch{TS: float64(1000 + i), Events: []kvevents.Event{
		kvevents.BlockStored{BlockHashes: []kvevents.BlockHash{kvevents.IntHash(uint64(100 + i))}, TokenIDs: []uint32{uint32(i), uint32(i + 1), uint32(i + 2), uint32(i + 3)}, BlockSize: 4, Medium: "GPU"},
	}}
}

// wantBatch is testBatch(i) as a subscriber sees it: the publisher fills in
// data_parallel_rank 0.
func wantBatch(i int) kvevents.Batch {
	b := testBatch(i)
	rank := int64(0)
	b.DataParallelRank = &rank
	return b
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func quietZMQ() zmq4.Option { return zmq4.WithLogger(log.New(io.Discard, "", 0)) }

// waitSubscribed waits until the publisher's PUB socket has seen topic
// subscribed, so that nothing published afterwards is lost to the ZMQ slow
// joiner effect.
func waitSubscribed(t *testing.T, p *Publisher, topic string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !slices.Contains(p.pub.(zmq4.Topics).Topics(), topic) {
		if time.Now().After(deadline) {
			t.Fatalf("no subscription to %q after 5s", topic)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// receive reads n messages from sub, retrying after connection errors the
// way a long-lived subscriber must (zmq4 reports a dropped peer as io.EOF).
func receive(t *testing.T, sub zmq4.Socket, n int) []kvevents.Message {
	t.Helper()
	type result struct {
		msgs []kvevents.Message
		err  error
	}
	done := make(chan result, 1)
	go func() {
		var r result
		for len(r.msgs) < n {
			msg, err := sub.Recv()
			if errors.Is(err, io.EOF) {
				continue
			}
			if err != nil {
				r.err = err
				break
			}
			m, err := kvevents.ParseMessage(msg.Frames)
			if err != nil {
				r.err = err
				break
			}
			r.msgs = append(r.msgs, m)
		}
		done <- r
	}()
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("receive: %v after %d messages", r.err, len(r.msgs))
		}
		return r.msgs
	case <-time.After(10 * time.Second):
		t.Fatalf("receive: timed out waiting for %d messages", n)
	}
	return nil
}

// checkMessages checks that msgs carry seqs first, first+1, ... and the
// batches testBatch(seq).
func checkMessages(t *testing.T, msgs []kvevents.Message, first, count int) {
	t.Helper()
	if len(msgs) != count {
		t.Fatalf("got %d messages, want %d", len(msgs), count)
	}
	for i, m := range msgs {
		want := uint64(first + i)
		if m.Seq != want || m.Topic != testTopic {
			t.Errorf("message %d: got seq %d topic %q, want seq %d topic %q", i, m.Seq, m.Topic, want, testTopic)
		}
		b, err := kvevents.DecodeBatch(m.Payload)
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if !reflect.DeepEqual(b, wantBatch(int(m.Seq))) {
			t.Errorf("message %d: got %+v, want %+v", i, b, wantBatch(int(m.Seq)))
		}
	}
}

func TestPublisherBindSubscribeReplay(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, enc := range []kvevents.Encoding{kvevents.Positional, kvevents.MapEncoding} {
		t.Run(enc.String(), func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Endpoint = "tcp://*:0" // "*" binds, as in vLLM; port 0 picks a free one
			cfg.ReplayEndpoint = "tcp://127.0.0.1:0"
			cfg.BufferSteps = 4
			cfg.Topic = testTopic
			p, err := NewPublisher(ctx, cfg, enc, testLogger(t))
			if err != nil {
				t.Fatalf("NewPublisher: %v", err)
			}
			defer p.Close()
			pubAddr, ok := p.Addr().(*net.TCPAddr)
			if !ok || pubAddr.Port == 0 {
				t.Fatalf("Addr: got %v, want a bound TCP address", p.Addr())
			}
			replayEndpoint := "tcp://" + p.ReplayAddr().String()

			sub := zmq4.NewSub(ctx, quietZMQ())
			defer sub.Close()
			if err := sub.SetOption(zmq4.OptionSubscribe, testTopic); err != nil {
				t.Fatal(err)
			}
			if err := sub.Dial("tcp://127.0.0.1:" + strconv.Itoa(pubAddr.Port)); err != nil {
				t.Fatalf("Dial: %v", err)
			}
			waitSubscribed(t, p, testTopic)

			const n = 6
			for i := range n {
				if err := p.Publish(testBatch(i)); err != nil {
					t.Fatalf("Publish %d: %v", i, err)
				}
			}
			checkMessages(t, receive(t, sub, n), 0, n)

			// The buffer keeps seqs 2..5.
			replays := []struct {
				name  string
				start uint64
				first int
				count int
			}{
				{"middle", 3, 3, 3},
				{"evicted start returns what remains", 0, 2, 4},
				{"future", n, 0, 0},
			}
			for _, r := range replays {
				got, err := Replay(ctx, replayEndpoint, r.start)
				if err != nil {
					t.Fatalf("Replay %s: %v", r.name, err)
				}
				t.Run("replay "+r.name, func(t *testing.T) { checkMessages(t, got, r.first, r.count) })
			}
			checkRawReplay(t, ctx, replayEndpoint, 4)

			if got, want := waitStats(t, p, n), (PublisherStats{Published: n, Replays: 4}); got != want {
				t.Errorf("Stats: got %+v, want %+v", got, want)
			}
			if err := p.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
			if err := p.Close(); err != nil {
				t.Errorf("second Close: %v", err)
			}
			if err := p.Publish(testBatch(n)); !errors.Is(err, ErrClosed) {
				t.Errorf("Publish after Close: got %v, want ErrClosed", err)
			}
		})
	}
}

// waitStats waits until the sender has handed published batches to the socket.
func waitStats(t *testing.T, p *Publisher, published uint64) PublisherStats {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for p.Stats().Published < published && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	return p.Stats()
}

// checkRawReplay replays from start with a bare DEALER and checks the exact
// frames, end marker included.
func checkRawReplay(t *testing.T, ctx context.Context, endpoint string, start uint64) {
	t.Helper()
	d := zmq4.NewDealer(ctx, quietZMQ())
	defer d.Close()
	if err := d.Dial(endpoint); err != nil {
		t.Fatalf("Dial replay: %v", err)
	}
	seq := func(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }
	if err := d.SendMulti(zmq4.NewMsgFrom([]byte{}, seq(start))); err != nil {
		t.Fatalf("send replay request: %v", err)
	}
	var got [][][]byte
	for {
		msg, err := d.Recv()
		if err != nil {
			t.Fatalf("Recv: %v", err)
		}
		got = append(got, msg.Frames)
		if len(msg.Frames) == 4 && binary.BigEndian.Uint64(msg.Frames[2]) == kvevents.EndSeq {
			break
		}
	}
	var want [][][]byte
	for s := start; s < 6; s++ {
		payload, err := kvevents.EncodeBatch(wantBatch(int(s)), kvevents.Positional)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, [][]byte{{}, []byte(testTopic), seq(s), payload})
	}
	want = append(want, [][]byte{{}, []byte(testTopic), seq(kvevents.EndSeq), {}})
	if len(got) != len(want) {
		t.Fatalf("raw replay: got %d replies, want %d", len(got), len(want))
	}
	for i := range got {
		// Payload bytes depend on the encoding; compare the decoded batch.
		if i < len(got)-1 {
			b, err := kvevents.DecodeBatch(got[i][3])
			if err != nil || !reflect.DeepEqual(b, wantBatch(int(start)+i)) {
				t.Errorf("raw replay %d: got %+v, %v, want %+v", i, b, err, wantBatch(int(start)+i))
			}
			got[i][3], want[i][3] = nil, nil
		}
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Errorf("raw replay %d: got %q, want %q", i, got[i], want[i])
		}
	}
}

func TestPublisherConnects(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The router side binds one SUB; the publisher dials it.
	sub := zmq4.NewSub(ctx, quietZMQ())
	defer sub.Close()
	if err := sub.SetOption(zmq4.OptionSubscribe, ""); err != nil {
		t.Fatal(err)
	}
	if err := sub.Listen("tcp://127.0.0.1:0"); err != nil {
		t.Fatalf("Listen: %v", err)
	}
	cfg := DefaultConfig()
	cfg.Endpoint = "tcp://" + sub.Addr().String()
	cfg.Topic = testTopic
	p, err := NewPublisher(ctx, cfg, kvevents.MapEncoding, testLogger(t))
	if err != nil {
		t.Fatalf("NewPublisher: %v", err)
	}
	defer p.Close()
	if p.Addr() != nil || p.ReplayAddr() != nil {
		t.Errorf("Addr, ReplayAddr: got %v, %v, want nil, nil", p.Addr(), p.ReplayAddr())
	}
	waitSubscribed(t, p, "")
	for i := range 3 {
		if err := p.Publish(testBatch(i)); err != nil {
			t.Fatalf("Publish: %v", err)
		}
	}
	checkMessages(t, receive(t, sub, 3), 0, 3)
}

func TestPublishDropsWhenQueueFull(t *testing.T) {
	// No sender goroutine: the queue fills after one batch.
	p := &Publisher{
		log:   slog.New(slog.DiscardHandler),
		topic: testTopic,
		buf:   ring{limit: 10},
		queue: make(chan kvevents.Message, 1),
	}
	for i := range 3 {
		if err := p.Publish(testBatch(i)); err != nil {
			t.Fatalf("Publish %d: %v", i, err)
		}
	}
	if got, want := p.Stats(), (PublisherStats{Dropped: 2}); got != want {
		t.Errorf("Stats: got %+v, want %+v", got, want)
	}
	if got := (<-p.queue).Seq; got != 0 {
		t.Errorf("queued seq: got %d, want 0", got)
	}
	// Dropped batches keep their seq and stay replayable.
	var seqs []uint64
	for _, m := range p.buf.since(0) {
		seqs = append(seqs, m.Seq)
	}
	if want := []uint64{0, 1, 2}; !reflect.DeepEqual(seqs, want) {
		t.Errorf("buffered seqs: got %v, want %v", seqs, want)
	}
}

func TestNewPublisherErrors(t *testing.T) {
	ctx := context.Background()
	bad := DefaultConfig()
	bad.MaxQueueSize = 0
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	inUse := DefaultConfig()
	inUse.Endpoint = "tcp://*:0"
	inUse.ReplayEndpoint = "tcp://" + busy.Addr().String()
	tests := []struct {
		name string
		cfg  Config
		enc  kvevents.Encoding
	}{
		{"invalid config", bad, kvevents.Positional},
		{"unknown encoding", DefaultConfig(), kvevents.Encoding(9)},
		{"replay port in use", inUse, kvevents.Positional},
		{"unknown transport", Config{Endpoint: "pgm://*:1", MaxQueueSize: 1}, kvevents.Positional},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := NewPublisher(ctx, tt.cfg, tt.enc, nil)
			if err == nil {
				p.Close()
				t.Fatalf("got nil error, want one")
			}
		})
	}
}

func TestReplayHonorsDeadline(t *testing.T) {
	// A ROUTER that never answers.
	ctx := context.Background()
	router := zmq4.NewRouter(ctx, quietZMQ())
	defer router.Close()
	if err := router.Listen("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := Replay(ctx, "tcp://"+router.Addr().String(), 0)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("got %v, want DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Replay returned after %v, want about 200ms", d)
	}
}
