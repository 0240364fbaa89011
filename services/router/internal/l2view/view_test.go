package l2view

import (
	"context"
	"slices"
	"testing"

	"github.com/warmpath/warmpath/libs/blockhash"
	"github.com/warmpath/warmpath/libs/kvevents"
)

const model = "m"

func TestStreamKeepsViewExact(t *testing.T) {
	h := hashOf
	for _, tc := range []struct {
		name string
		// run drives the server and the endpoint; the view must then hold
		// want of hashes 0..9, after these resyncs.
		run     func(t *testing.T, f *fakeServer, e *endpoint)
		want    []int
		resyncs map[string]uint64
	}{{
		name: "events apply",
		run: func(t *testing.T, f *fakeServer, e *endpoint) {
			feed(t, e, f.change(model, stored(h(0), h(1), h(2))))
			feed(t, e, f.change(model, stored(h(3))), f.change(model, removed(h(1))), f.change(model, removed(h(9))))
		},
		want: []int{0, 2, 3}, resyncs: map[string]uint64{ReasonNewModel: 1},
	}, {
		name: "batches already in the snapshot are skipped",
		run: func(t *testing.T, f *fakeServer, e *endpoint) {
			m0 := f.change(model, stored(h(0)))
			m1 := f.change(model, removed(h(0)))
			m2 := f.change(model, stored(h(2)))
			feed(t, e, m0, m1, m2) // the snapshot on m0 is at seq 2 already
		},
		want: []int{2}, resyncs: map[string]uint64{ReasonNewModel: 1},
	}, {
		name: "gap resyncs",
		run: func(t *testing.T, f *fakeServer, e *endpoint) {
			feed(t, e, f.change(model, stored(h(0), h(1))))
			f.change(model, removed(h(0))) // lost
			feed(t, e, f.change(model, stored(h(4))))
		},
		want: []int{1, 4}, resyncs: map[string]uint64{ReasonNewModel: 1, ReasonGap: 1},
	}, {
		name: "undecodable batch resyncs",
		run: func(t *testing.T, f *fakeServer, e *endpoint) {
			feed(t, e, f.change(model, stored(h(0))))
			m := f.change(model, stored(h(5)))
			m.Payload = []byte{0xc1}
			feed(t, e, m)
		},
		want: []int{0, 5}, resyncs: map[string]uint64{ReasonNewModel: 1, ReasonGap: 1},
	}, {
		name: "restart resyncs",
		run: func(t *testing.T, f *fakeServer, e *endpoint) {
			feed(t, e, f.change(model, stored(h(0), h(1))), f.change(model, stored(h(2))))
			f.restart()
			feed(t, e, f.change(model, stored(h(7))))
		},
		want: []int{7}, resyncs: map[string]uint64{ReasonNewModel: 1, ReasonRestart: 1},
	}, {
		name: "AllBlocksCleared resyncs",
		run: func(t *testing.T, f *fakeServer, e *endpoint) {
			feed(t, e, f.change(model, stored(h(0), h(1))))
			// The server dropped the removal of 0 and the store of 3 from
			// its queue; its view is right, its stream says so only by
			// clearing.
			f.change(model, removed(h(0)), stored(h(3)))
			f.seq-- // nothing published for them
			feed(t, e, f.change(model, kvevents.AllBlocksCleared{}))
		},
		want: []int{1, 3}, resyncs: map[string]uint64{ReasonNewModel: 1, ReasonCleared: 1},
	}, {
		name: "a model is known only to its topic",
		run: func(t *testing.T, f *fakeServer, e *endpoint) {
			feed(t, e, f.change("other", stored(h(0))), f.change(model, stored(h(1))))
		},
		want: []int{1}, resyncs: map[string]uint64{ReasonNewModel: 2},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeServer(t)
			v := newTestView(t, Config{}, f)
			e := v.eps[0]
			tc.run(t, f, e)
			if got := held(v, model, 10); !slices.Equal(got, tc.want) {
				t.Errorf("view holds %v, want %v", got, tc.want)
			}
			hl := v.Health()[0]
			for r, n := range tc.resyncs {
				if hl.Resyncs[r] != n {
					t.Errorf("resyncs = %v, want %v", hl.Resyncs, tc.resyncs)
					break
				}
			}
			if hl.Chunks != len(v.models[model])+len(v.models["other"]) {
				t.Errorf("endpoint counts %d chunks, view holds %d", hl.Chunks, len(v.models[model]))
			}
		})
	}
}

func TestUnionAcrossEndpoints(t *testing.T) {
	a, b := newFakeServer(t), newFakeServer(t)
	v := newTestView(t, Config{}, a, b)
	ea, eb := v.eps[0], v.eps[1]
	feed(t, ea, a.change(model, stored(hashOf(0), hashOf(1))))
	feed(t, eb, b.change(model, stored(hashOf(1), hashOf(2))))
	for _, step := range []struct {
		name    string
		do      func()
		holders []int // of hashes 0, 1, 2
	}{
		{"both stored", func() {}, []int{1, 2, 1}},
		{"a removes its copy of 1: b's still counts", func() { feed(t, ea, a.change(model, removed(hashOf(1)))) }, []int{1, 1, 1}},
		{"b removes 1 too", func() { feed(t, eb, b.change(model, removed(hashOf(1)))) }, []int{1, 0, 1}},
		{"a restarts empty: b's chunks stay", func() { a.restart(); feed(t, ea, a.change(model, stored())) }, []int{0, 0, 1}},
		{"b gone too long", func() { eb.drop(eb.gen) }, []int{0, 0, 0}},
	} {
		step.do()
		var got []int
		for i := range 3 {
			got = append(got, v.holders(model, keyOf(hashOf(i))))
		}
		if !slices.Equal(got, step.holders) {
			t.Errorf("%s: holders %v, want %v", step.name, got, step.holders)
		}
	}
	if s := v.Stats(); s.Chunks != 0 {
		t.Errorf("view counts %d chunks, want 0", s.Chunks)
	}
}

func TestDropOnlyWhileStillDisconnected(t *testing.T) {
	f := newFakeServer(t)
	v := newTestView(t, Config{}, f)
	e := v.eps[0]
	feed(t, e, f.change(model, stored(hashOf(0))))
	gen := e.disconnected(nil)
	// It reconnected before the timer fired: the timer must leave the
	// fresh connection's chunks alone.
	v.mu.Lock()
	e.gen++
	e.connected = true
	v.mu.Unlock()
	e.drop(gen)
	if got := held(v, model, 1); len(got) != 1 {
		t.Fatalf("a reconnected server's chunks were dropped")
	}
	e.drop(e.disconnected(nil))
	if got := held(v, model, 1); len(got) != 0 {
		t.Fatalf("a disconnected server's chunks still count")
	}
}

func TestMaxChunksRefusesNewChunks(t *testing.T) {
	a, b := newFakeServer(t), newFakeServer(t)
	v := newTestView(t, Config{MaxChunks: 2}, a, b)
	feed(t, v.eps[0], a.change(model, stored(hashOf(0), hashOf(1), hashOf(2))))
	// b's copy of a held chunk costs no entry, so it is taken.
	feed(t, v.eps[1], b.change(model, stored(hashOf(1))))
	if got, want := held(v, model, 3), []int{0, 1}; !slices.Equal(got, want) {
		t.Errorf("held %v, want %v", got, want)
	}
	if got := v.holders(model, keyOf(hashOf(1))); got != 2 {
		t.Errorf("chunk 1 has %d holders, want 2", got)
	}
	if s := v.Stats(); s.Refused != 1 || s.Chunks != 2 {
		t.Errorf("stats %+v, want 2 chunks and 1 refused", s)
	}
	// A removal frees room.
	feed(t, v.eps[0], a.change(model, removed(hashOf(0))), a.change(model, stored(hashOf(3))))
	if got, want := held(v, model, 4), []int{1, 3}; !slices.Equal(got, want) {
		t.Errorf("after a removal held %v, want %v", got, want)
	}
}

func TestLeadingStopsAtFirstMiss(t *testing.T) {
	const cs = 16
	hasher, err := blockhash.New("0")
	if err != nil {
		t.Fatal(err)
	}
	tokens := make([]uint32, 5*cs+3)
	for i := range tokens {
		tokens[i] = uint32(i * 7)
	}
	chain := hasher.Chain(tokens, cs, nil)
	for _, tc := range []struct {
		name string
		held []int // chunk indexes stored
		want int   // leading tokens
	}{
		{"none", nil, 0},
		{"first two", []int{0, 1}, 2 * cs},
		{"all five; the partial tail never counts", []int{0, 1, 2, 3, 4}, 5 * cs},
		{"a hole stops it", []int{0, 1, 3, 4}, 2 * cs},
		{"no first chunk", []int{1, 2}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeServer(t)
			v := newTestView(t, Config{ChunkTokens: cs, HashSeed: "0"}, f)
			var hs []blockhash.Hash
			for _, i := range tc.held {
				hs = append(hs, chain[i])
			}
			feed(t, v.eps[0], f.change(model, stored(hs...)))
			if got := v.Leading(model, "", tokens); got != tc.want {
				t.Errorf("Leading = %d, want %d", got, tc.want)
			}
			if got := v.Leading("another-model", "", tokens); got != 0 {
				t.Errorf("Leading of another model = %d, want 0", got)
			}
			// LMCache's keys do not name an adapter: a LoRA request is
			// never credited with what may be the base model's KV.
			if got := v.Leading(model, "sql-lora", tokens); got != 0 {
				t.Errorf("Leading for a LoRA adapter = %d, want 0", got)
			}
		})
	}
	// Another seed chains from another root: nothing matches.
	f := newFakeServer(t)
	v := newTestView(t, Config{ChunkTokens: cs, HashSeed: "1"}, f)
	feed(t, v.eps[0], f.change(model, stored(chain...)))
	if got := v.Leading(model, "", tokens); got != 0 {
		t.Errorf("Leading with another seed = %d, want 0", got)
	}
}

func TestSnapshotFailureEndsConnection(t *testing.T) {
	f := newFakeServer(t)
	f.fail = true
	v := newTestView(t, Config{}, f)
	if err := v.eps[0].handle(context.Background(), f.change(model, stored(hashOf(0)))); err == nil {
		t.Fatal("a failed snapshot was not reported")
	}
}

func TestNewRejects(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"no seed", Config{Endpoints: []Endpoint{{"tcp://a:1", "http://a"}}}},
		{"no snapshot URL", Config{HashSeed: "0", Endpoints: []Endpoint{{"tcp://a:1", ""}}}},
		{"too many", Config{HashSeed: "0", Endpoints: make([]Endpoint, MaxEndpoints+1)}},
	} {
		if _, err := New(tc.cfg, nil); err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
	}
}

func TestParseEndpoints(t *testing.T) {
	for _, tc := range []struct {
		name, events, snapshots string
		want                    []Endpoint
		bad                     bool
	}{
		{name: "none", want: []Endpoint{}},
		{name: "two, spaces trimmed", events: "tcp://a:5557, tcp://b:5557", snapshots: "http://a:8080,https://b:8443 ",
			want: []Endpoint{{"tcp://a:5557", "http://a:8080"}, {"tcp://b:5557", "https://b:8443"}}},
		{name: "counts differ", events: "tcp://a:5557", snapshots: "", bad: true},
		{name: "not tcp", events: "a:5557", snapshots: "http://a", bad: true},
		{name: "not http", events: "tcp://a:5557", snapshots: "a:8080", bad: true},
	} {
		got, err := ParseEndpoints(tc.events, tc.snapshots)
		if tc.bad != (err != nil) || !slices.Equal(got, tc.want) && !tc.bad {
			t.Errorf("%s: got %v, %v; want %v", tc.name, got, err, tc.want)
		}
	}
}
