package kvzmq

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/warmpath/warmpath/libs/kvevents"
)

// PublishTopic names each message's topic; seqs stay one counter across
// topics, and a replay returns each batch under the topic it went out with.
func TestPublishTopic(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cfg := DefaultConfig()
	cfg.Endpoint = "tcp://*:0"
	cfg.ReplayEndpoint = "tcp://127.0.0.1:0"
	cfg.Topic = "default"
	p, err := NewPublisher(ctx, cfg, kvevents.Positional, testLogger(t))
	if err != nil {
		t.Fatalf("NewPublisher: %v", err)
	}
	defer p.Close()
	sub := zmq4.NewSub(ctx, quietZMQ())
	defer sub.Close()
	if err := sub.SetOption(zmq4.OptionSubscribe, ""); err != nil {
		t.Fatal(err)
	}
	if err := sub.Dial("tcp://127.0.0.1:" + strconv.Itoa(p.Addr().(*net.TCPAddr).Port)); err != nil {
		t.Fatalf("Dial: %v", err)
	}
	waitSubscribed(t, p, "")

	topics := []string{"l2@a", "l2@b", "", "default"}
	for i, topic := range topics {
		var err error
		if topic == "default" {
			err = p.Publish(testBatch(i)) // the old call keeps its topic
		} else {
			err = p.PublishTopic(topic, testBatch(i))
		}
		if err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	check := func(what string, msgs []kvevents.Message) {
		t.Helper()
		if len(msgs) != len(topics) {
			t.Fatalf("%s: got %d messages, want %d", what, len(msgs), len(topics))
		}
		for i, m := range msgs {
			if m.Topic != topics[i] || m.Seq != uint64(i) {
				t.Errorf("%s %d: got topic %q seq %d, want %q %d", what, i, m.Topic, m.Seq, topics[i], i)
			}
		}
	}
	check("live", receive(t, sub, len(topics)))
	replayed, err := Replay(ctx, "tcp://"+p.ReplayAddr().String(), 0)
	if err != nil {
		t.Fatalf("Replay: %v", err)
	}
	check("replay", replayed)
}
