package l2events

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/warmpath/warmpath/libs/kvevents"
	"github.com/warmpath/warmpath/services/cacheserver/internal/store"
)

// fakeStore is a Source: a set of keys; set and del tell the observer.
type fakeStore struct {
	mu   sync.Mutex
	keys map[string]bool
	obs  store.Observer
}

func (f *fakeStore) Observe(fn store.Observer) { f.obs = fn }
func (f *fakeStore) Present(k string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.keys[k]
}

func (f *fakeStore) Range(fn func(string)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for k := range f.keys {
		fn(k)
	}
}

func (f *fakeStore) set(k string) {
	f.mu.Lock()
	f.keys[k] = true
	f.obs(k)
	f.mu.Unlock()
}

func (f *fakeStore) del(k string) {
	f.mu.Lock()
	delete(f.keys, k)
	f.obs(k)
	f.mu.Unlock()
}

// fakePub records batches.
type fakePub struct {
	topics  []string
	batches []kvevents.Batch
}

func (p *fakePub) PublishTopic(topic string, b kvevents.Batch) error {
	p.topics = append(p.topics, topic)
	p.batches = append(p.batches, b)
	return nil
}
func (p *fakePub) Sequenced() uint64 { return uint64(len(p.batches)) }

func counters() Counters {
	c := func() prometheus.Counter { return prometheus.NewCounter(prometheus.CounterOpts{Name: "x"}) }
	return Counters{Published: c(), Dropped: c(), Unparsed: c()}
}

func key(model string, worker int, hash, suffix string) string {
	return fmt.Sprintf("%s@1@%d@%s@bfloat16%s", model, worker, hash, suffix)
}

// summary writes events in short: "+hash" stored, "-hash" removed, "clear", each
// under "model:".
func summary(topics []string, batches []kvevents.Batch) []string {
	var out []string
	for i, b := range batches {
		model := strings.TrimPrefix(topics[i], TopicPrefix)
		for _, e := range b.Events {
			switch e := e.(type) {
			case kvevents.BlockStored:
				out = append(out, fmt.Sprintf("%s:+%x", model, e.BlockHashes[0].Bytes()[31]))
			case kvevents.BlockRemoved:
				out = append(out, fmt.Sprintf("%s:-%x", model, e.BlockHashes[0].Bytes()[31]))
			case kvevents.AllBlocksCleared:
				out = append(out, model+":clear")
			}
		}
	}
	return out
}

func TestTrackerEvents(t *testing.T) {
	type op struct {
		del bool
		key string
	}
	set := func(k string) op { return op{key: k} }
	del := func(k string) op { return op{del: true, key: k} }
	tests := []struct {
		name     string
		before   []op // applied and published first
		ops      []op
		want     []string
		unparsed float64
	}{
		{name: "new key", ops: []op{set(key("m", 0, "a1", ""))}, want: []string{"m:+a1"}},
		{name: "overwrite is no event", before: []op{set(key("m", 0, "a1", ""))}, ops: []op{set(key("m", 0, "a1", ""))}},
		{name: "delete", before: []op{set(key("m", 0, "a1", ""))}, ops: []op{del(key("m", 0, "a1", ""))}, want: []string{"m:-a1"}},
		{name: "delete of an absent key", ops: []op{del(key("m", 0, "a1", ""))}},
		{name: "stored and gone within a pass", ops: []op{set(key("m", 0, "a1", "")), del(key("m", 0, "a1", ""))}},
		{name: "redis pair counts once", ops: []op{set(key("m", 0, "a1", "kv_bytes")), set(key("m", 0, "a1", "metadata"))}, want: []string{"m:+a1"}},
		{name: "metadata alone is no event", ops: []op{set(key("m", 0, "a1", ":metadata"))}},
		{
			name:   "a hash stays while any worker's key holds it",
			before: []op{set(key("m", 0, "a1", "")), set(key("m", 1, "a1", ":kv_bytes"))},
			ops:    []op{del(key("m", 0, "a1", ""))},
		},
		{
			name:   "and goes with the last",
			before: []op{set(key("m", 0, "a1", "")), set(key("m", 1, "a1", ":kv_bytes"))},
			ops:    []op{del(key("m", 0, "a1", "")), del(key("m", 1, "a1", ":kv_bytes"))},
			want:   []string{"m:-a1"},
		},
		{name: "short and long hash forms are one chunk", before: []op{set(key("m", 0, strings.Repeat("0", 62)+"a1", ""))}, ops: []op{set(key("m", 0, "a1", "kv_bytes"))}},
		{name: "models publish apart, in name order", ops: []op{set(key("b", 0, "b2", "")), set(key("a", 0, "a1", ""))}, want: []string{"a:+a1", "b:+b2"}},
		{name: "garbage is counted, not published", ops: []op{set("hello"), set("x@y")}, unparsed: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src, pub := &fakeStore{keys: map[string]bool{}}, &fakePub{}
			c := counters()
			tr := New(Config{}, src, pub, c, nil)
			apply := func(ops []op) {
				for _, o := range ops {
					if o.del {
						src.del(o.key)
					} else {
						src.set(o.key)
					}
				}
				tr.pass()
			}
			apply(tt.before)
			n := len(pub.batches)
			apply(tt.ops)
			if got := summary(pub.topics[n:], pub.batches[n:]); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("events %v, want %v", got, tt.want)
			}
			if got := testutil.ToFloat64(c.Unparsed); got != tt.unparsed {
				t.Errorf("unparsed %v, want %v", got, tt.unparsed)
			}
		})
	}
}

// A full queue drops changes, then clears every model and rebuilds the view
// from the store; the snapshot after it is the store's truth.
func TestTrackerOverflow(t *testing.T) {
	src, pub := &fakeStore{keys: map[string]bool{}}, &fakePub{}
	c := counters()
	tr := New(Config{MaxPending: 4, MaxBatch: 2}, src, pub, c, nil)
	src.set(key("old", 0, "01", ""))
	tr.pass()
	src.del(key("old", 0, "01", ""))
	for i := range 10 {
		src.set(key("m", 0, fmt.Sprintf("%02x", i+16), ""))
	}
	if got := testutil.ToFloat64(c.Dropped); got < 1 {
		t.Fatalf("dropped %v, want some", got)
	}
	n := len(pub.batches)
	tr.pass()
	if got, want := summary(pub.topics[n:], pub.batches[n:]), []string{"m:clear", "old:clear"}; !reflect.DeepEqual(got, want) {
		t.Errorf("events %v, want %v", got, want)
	}
	seq, hashes, err := tr.Snapshot("m")
	if err != nil || seq != int64(len(pub.batches))-1 || len(hashes) != 10 {
		t.Errorf("snapshot: seq %d (%d batches) %d hashes %v", seq, len(pub.batches), len(hashes), err)
	}
	if _, hashes, _ := tr.Snapshot("old"); len(hashes) != 0 {
		t.Errorf("old model: %d hashes after its key went", len(hashes))
	}
	if _, _, err := tr.Snapshot("m"); err != nil {
		t.Fatal(err)
	}
	tr.cfg.MaxSnapshot = 5
	if _, _, err := tr.Snapshot("m"); !errors.Is(err, ErrSnapshotTooLarge) {
		t.Errorf("over the cap: %v, want ErrSnapshotTooLarge", err)
	}
}

func TestServeSnapshot(t *testing.T) {
	src, pub := &fakeStore{keys: map[string]bool{}}, &fakePub{}
	tr := New(Config{}, src, pub, counters(), nil)
	src.set(key("org/m", 0, "02", ""))
	src.set(key("org/m", 0, "01", ""))
	tr.pass()
	tests := []struct {
		url    string
		status int
		body   string
	}{
		{"/?model=org%2Fm", 200, `{"seq":0,"hashes":["` + strings.Repeat("0", 62) + `01","` + strings.Repeat("0", 62) + `02"]}` + "\n"},
		{"/?model=none", 200, `{"seq":0,"hashes":[]}` + "\n"},
		{"/", 400, ""},
	}
	for _, tt := range tests {
		rec := httptest.NewRecorder()
		tr.ServeSnapshot(rec, httptest.NewRequest(http.MethodGet, tt.url, nil))
		body, _ := io.ReadAll(rec.Body)
		if rec.Code != tt.status || (tt.body != "" && string(body) != tt.body) {
			t.Errorf("%s: %d %s, want %d %s", tt.url, rec.Code, body, tt.status, tt.body)
		}
	}
}

// Run publishes what observe queued, and its last pass on the way out.
func TestTrackerRun(t *testing.T) {
	src, pub := &fakeStore{keys: map[string]bool{}}, &fakePub{}
	tr := New(Config{}, src, pub, counters(), nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { tr.Run(ctx); close(done) }()
	src.set(key("m", 0, "a1", ""))
	cancel()
	<-done
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if got := summary(pub.topics, pub.batches); !reflect.DeepEqual(got, []string{"m:+a1"}) {
		t.Errorf("events %v", got)
	}
}
