package l2view

import (
	"context"
	"fmt"
	"math/bits"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/warmpath/warmpath/libs/kvevents"
	"github.com/warmpath/warmpath/libs/kvevents/kvzmq"
)

// TestRunFollowsAPublisher runs the view against a real ZMQ publisher:
// chunks stored before the router connected come from the snapshot, later
// ones from the stream, and a server that goes away stops counting.
func TestRunFollowsAPublisher(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := kvzmq.DefaultConfig()
	p, port := startPublisher(ctx, t)
	f := newFakeServer(t)
	publish := func(evs ...kvevents.Event) {
		t.Helper()
		m := f.change(model, evs...)
		if err := p.PublishTopic(m.Topic, kvevents.Batch{TS: 1, Events: evs}); err != nil {
			t.Fatal(err)
		}
	}
	publish(stored(hashOf(0), hashOf(1))) // before anyone subscribed

	v, err := New(Config{
		Endpoints: []Endpoint{{Events: "tcp://127.0.0.1:" + port, SnapshotURL: f.srv.URL}}, HashSeed: "0",
		RetryInterval: 50 * time.Millisecond, DropAfter: 300 * time.Millisecond,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewCollector(v))
	done := make(chan struct{})
	go func() { defer close(done); v.Run(ctx) }()
	eventually(t, "connected", func() bool { return v.Health()[0].Connected })
	v.Leading(model, "", nil) // a routed request names the model: its snapshot is fetched
	eventually(t, "the snapshot's chunks", func() bool { return slices.Equal(held(v, model, 4), []int{0, 1}) })

	// The subscription may take effect a moment after the dial: publish
	// until the stream delivers.
	eventually(t, "chunks from the stream", func() bool {
		publish(stored(hashOf(2)), removed(hashOf(0)))
		return slices.Equal(held(v, model, 4), []int{1, 2})
	})
	if h := v.Health()[0]; h.EventsTotal == 0 || h.LastSeq < 1 {
		t.Errorf("health %+v: want events applied and the last seq", h)
	}
	if n, err := testutil.GatherAndCount(reg, "warmpath_router_l2_chunks", "warmpath_router_l2_connected", "warmpath_router_l2_resyncs_total", "warmpath_router_l2_events_total"); err != nil || n != 8 {
		t.Errorf("metrics: %d series, %v", n, err)
	}
	if got := testutil.ToFloat64(chunkGauge(t, reg)); got != 2 {
		t.Errorf("warmpath_router_l2_chunks = %v, want 2", got)
	}

	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "disconnected", func() bool { return !v.Health()[0].Connected })
	eventually(t, "a gone server's chunks dropped", func() bool { return len(held(v, model, 4)) == 0 })

	// It comes back as a new process, on the same port, holding something
	// else: the reconnect resyncs from its snapshot.
	cfg.Endpoint = "tcp://*:" + port
	p2, err := kvzmq.NewPublisher(ctx, cfg, kvevents.MapEncoding, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Close()
	f.restart()
	p = p2
	publish(stored(hashOf(3)))
	eventually(t, "the new process's chunks", func() bool { return slices.Equal(held(v, model, 4), []int{3}) })
	if h := v.Health()[0]; !h.Connected || h.Resyncs[ReasonConnect] == 0 {
		t.Errorf("health %+v: want connected after a connect resync", h)
	}
	cancel()
	<-done
}

// startPublisher binds a KV-event publisher on a free port, closed when
// the test ends, and returns it with the port.
func startPublisher(ctx context.Context, t *testing.T) (*kvzmq.Publisher, string) {
	t.Helper()
	cfg := kvzmq.DefaultConfig()
	cfg.Endpoint = "tcp://*:0"
	p, err := kvzmq.NewPublisher(ctx, cfg, kvevents.MapEncoding, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	_, port, _ := strings.Cut(p.Addr().String(), "]:")
	if port == "" {
		_, port, _ = strings.Cut(p.Addr().String(), ":")
	}
	return p, port
}

func chunkGauge(t *testing.T, reg *prometheus.Registry) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "warmpath_router_l2_chunks" {
			g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "x"})
			g.Set(mf.GetMetric()[0].GetGauge().GetValue())
			return g
		}
	}
	t.Fatal("no warmpath_router_l2_chunks")
	return nil
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestUpdateFollowsMembership: the view follows the cache servers a
// discovery source reports: one that joins is dialed and its snapshot
// taken, one that leaves stops counting at once (not after DropAfter), and
// one that comes back is followed again.
func TestUpdateFollowsMembership(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	servers := make([]Endpoint, 2)
	for i := range servers {
		_, port := startPublisher(ctx, t)
		f := newFakeServer(t)
		f.change(model, stored(hashOf(i))) // server i holds chunk i
		servers[i] = Endpoint{Events: "tcp://127.0.0.1:" + port, SnapshotURL: f.srv.URL}
	}
	v, err := New(Config{HashSeed: "0", RetryInterval: 50 * time.Millisecond, DropAfter: time.Hour}, nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); v.Run(ctx) }()
	v.Leading(model, "", nil) // a routed request names the model: snapshots are fetched

	steps := []struct {
		members []int
		want    []int // chunks held, i.e. the members
	}{
		{[]int{0}, []int{0}},
		{[]int{0, 1}, []int{0, 1}},
		{[]int{1}, []int{1}}, // 0 left: dropped though DropAfter is an hour
		{nil, nil},
		{[]int{1, 0}, []int{0, 1}}, // both back
	}
	for _, st := range steps {
		var eps []Endpoint
		for _, i := range st.members {
			eps = append(eps, servers[i])
		}
		v.Update(eps)
		eventually(t, fmt.Sprintf("chunks %v with members %v", st.want, st.members), func() bool {
			return slices.Equal(held(v, model, 4), st.want) && len(v.Health()) == len(st.members)
		})
	}
	v.mu.RLock()
	used := v.used
	v.mu.RUnlock()
	if bits.OnesCount64(used) != 2 {
		t.Errorf("holder bits in use %b, want 2: a gone server's bit is freed", used)
	}
	cancel()
	<-done
}
