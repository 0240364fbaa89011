package strategy

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/warmpath/warmpath/services/router/internal/l2learn"
	"github.com/warmpath/warmpath/services/router/kvindex"
)

// tokenIDs is a deterministic token sequence for a seed.
func tokenIDs(seed uint64, n int) []uint32 {
	r := rand.New(rand.NewPCG(seed, 7))
	out := make([]uint32, n)
	for i := range out {
		out[i] = r.Uint32N(100000)
	}
	return out
}

func kvEPs(loads ...int) []Endpoint {
	out := eps(loads...)
	for i := range out {
		out[i].BlockSize = 16
	}
	return out
}

func TestKVAwarePick(t *testing.T) {
	prompt := tokenIDs(1, 16*32) // 32 blocks
	keys := kvindex.AppendKeys(nil, kvindex.Seed("m", ""), prompt, 16)
	tests := []struct {
		name  string
		setup func(x *kvindex.Index, e []Endpoint)
		loads []int
		want  int // index into eps
	}{
		{"most GPU blocks wins", func(x *kvindex.Index, e []Endpoint) {
			x.Add(e[1].ID, kvindex.GPU, keys[:20])
			x.Add(e[2].ID, kvindex.GPU, keys[:10])
		}, []int{0, 0, 0}, 1},
		{"GPU beats the same run in CPU", func(x *kvindex.Index, e []Endpoint) {
			x.Add(e[0].ID, kvindex.CPU, keys[:20])
			x.Add(e[2].ID, kvindex.GPU, keys[:20])
		}, []int{0, 0, 0}, 2},
		{"a longer CPU run beats a short GPU one", func(x *kvindex.Index, e []Endpoint) {
			x.Add(e[0].ID, kvindex.CPU, keys)
			x.Add(e[1].ID, kvindex.GPU, keys[:4])
		}, []int{0, 0, 0}, 0},
		{"the load guard keeps a hot worker out", func(x *kvindex.Index, e []Endpoint) {
			x.Add(e[0].ID, kvindex.GPU, keys)
		}, []int{9, 0, 0}, -1},
		{"a long prefill queue outweighs the whole prompt cached", func(x *kvindex.Index, e []Endpoint) {
			x.Add(e[0].ID, kvindex.GPU, keys)
			e[0].PendingPrefill = 4000
		}, []int{0, 0, 0}, -1},
		{"a short prefill queue does not", func(x *kvindex.Index, e []Endpoint) {
			x.Add(e[0].ID, kvindex.GPU, keys)
			e[0].PendingPrefill = 100
		}, []int{0, 0, 0}, 0},
		{"load breaks a tie on cache", func(x *kvindex.Index, e []Endpoint) {
			x.Add(e[0].ID, kvindex.GPU, keys)
			x.Add(e[1].ID, kvindex.GPU, keys)
		}, []int{1, 0, 3}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x := kvindex.New(1 << 10)
			e := kvEPs(tt.loads...)
			tt.setup(x, e)
			k := NewKVAware(KVAwareConfig{}, LoadGuardConfig{Window: 1, Ratio: 0.2}, x, NewPrefixAware(PrefixAwareConfig{}, LoadGuardConfig{}))
			d, err := k.Pick(&Request{Model: "m", TokenIDs: prompt}, e)
			if err != nil {
				t.Fatal(err)
			}
			if d.Strategy != NameKVAware || d.TotalChunks != 32 {
				t.Fatalf("decision %+v", d)
			}
			if tt.want >= 0 && d.Endpoint != e[tt.want].ID {
				t.Fatalf("picked %s, want %s (%+v)", d.Endpoint, e[tt.want].ID, d)
			}
			if tt.want < 0 && d.Endpoint == e[0].ID {
				t.Fatal("picked the overloaded worker")
			}
		})
	}
}

func TestKVAwareWithoutTokensFallsBack(t *testing.T) {
	k := NewKVAware(KVAwareConfig{}, LoadGuardConfig{}, kvindex.New(16), NewPrefixAware(PrefixAwareConfig{}, LoadGuardConfig{}))
	d, err := k.Pick(&Request{Model: "m", Prompt: "hello"}, kvEPs(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	if d.Strategy != NamePrefixAware {
		t.Fatalf("strategy %q, want the prefixaware fallback", d.Strategy)
	}
}

// TestKVAwarePredictions: siblings routed before the first one's events
// arrive land on the same worker; the prediction expires.
func TestKVAwarePredictions(t *testing.T) {
	x := kvindex.New(1 << 10)
	k := NewKVAware(KVAwareConfig{PredictionTTLSeconds: 1}, LoadGuardConfig{Window: 2}, x, NewPrefixAware(PrefixAwareConfig{}, LoadGuardConfig{}))
	now := time.Unix(1000, 0)
	k.now = func() time.Time { return now }
	e := kvEPs(0, 0, 0, 0)
	prompt := tokenIDs(3, 16*8)
	first, _ := k.Pick(&Request{Model: "m", TokenIDs: prompt}, e)
	for i := range 3 {
		d, _ := k.Pick(&Request{Model: "m", TokenIDs: append(prompt[:len(prompt):len(prompt)], tokenIDs(uint64(10+i), 16)...)}, e)
		if d.Endpoint != first.Endpoint {
			t.Fatalf("sibling %d went to %s, first to %s", i, d.Endpoint, first.Endpoint)
		}
		if d.MatchedChunks != 8 {
			t.Fatalf("sibling %d: %d predicted blocks, want 8", i, d.MatchedChunks)
		}
	}
	now = now.Add(2 * time.Second)
	d, _ := k.Pick(&Request{Model: "m", TokenIDs: prompt}, e)
	if d.MatchedChunks != 0 {
		t.Fatalf("expired prediction still credited: %+v", d)
	}
	k.Forget(first.Endpoint)
	if k.preds.Len() != 0 && d.Endpoint == first.Endpoint {
		t.Fatal("predictions of a forgotten worker kept")
	}
}

// TestKVAwareConfirmEndsPredictions: once the worker's events confirm the
// blocks, the index alone decides — a later eviction is not hidden by a
// prediction still within its TTL.
func TestKVAwareConfirmEndsPredictions(t *testing.T) {
	x := kvindex.New(1 << 10)
	k := NewKVAware(KVAwareConfig{PredictionTTLSeconds: 60}, LoadGuardConfig{Window: 2}, x, NewPrefixAware(PrefixAwareConfig{}, LoadGuardConfig{}))
	e := kvEPs(0, 0)
	prompt := tokenIDs(5, 16*4)
	keys := kvindex.AppendKeys(nil, kvindex.Seed("m", ""), prompt, 16)
	d, _ := k.Pick(&Request{Model: "m", TokenIDs: prompt}, e)
	x.Add(d.Endpoint, kvindex.GPU, keys) // the worker stored them
	k.preds.Confirm(d.Endpoint, keys)
	x.Remove(d.Endpoint, kvindex.GPU, keys) // and evicted them
	if again, _ := k.Pick(&Request{Model: "m", TokenIDs: prompt}, e); again.MatchedChunks != 0 {
		t.Fatalf("an evicted, confirmed block is still credited: %+v", again)
	}
}

func TestKVAwarePrefillTokensAndQueueWeight(t *testing.T) {
	prompt := tokenIDs(2, 16*32+5) // 32 full blocks and 5 tokens
	keys := kvindex.AppendKeys(nil, kvindex.Seed("m", ""), prompt, 16)
	tests := []struct {
		name        string
		queueWeight float64
		want        int // index into eps
		prefill     int // the decision's PrefillTokens
	}{
		{"default weight 0.25: the 1000-token queue costs 250, less than the 320 cached tokens save", 0, 0, len(prompt) - 20*16},
		{"weight 1: the queue counts in full", 1, 1, len(prompt)},
		{"negative weight: the queue is ignored", -1, 0, len(prompt) - 20*16},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x := kvindex.New(1 << 10)
			e := kvEPs(0, 0)
			x.Add(e[0].ID, kvindex.GPU, keys[:20])
			e[0].PendingPrefill = 1000 // the cache saves 320 tokens
			k := NewKVAware(KVAwareConfig{QueueWeight: tt.queueWeight}, LoadGuardConfig{Window: 1}, x, NewPrefixAware(PrefixAwareConfig{}, LoadGuardConfig{}))
			d, err := k.Pick(&Request{Model: "m", TokenIDs: prompt}, e)
			if err != nil {
				t.Fatal(err)
			}
			if d.Endpoint != e[tt.want].ID || d.PrefillTokens != tt.prefill {
				t.Fatalf("got %s with %d prefill tokens, want %s with %d", d.Endpoint, d.PrefillTokens, e[tt.want].ID, tt.prefill)
			}
		})
	}
}

// fixedL2 is an L2 holding the first n tokens of every prompt of model.
type fixedL2 struct {
	model string
	n     int
}

func (fixedL2) ChunkTokens() int { return 256 }

func (f fixedL2) Leading(model, _ string, tokens []uint32) int {
	if model != f.model {
		return 0
	}
	return min(f.n, len(tokens))
}

// prefillNotes counts the prompt keys kvaware passes on per worker when
// their prefill ends.
type prefillNotes map[string]int

func (r prefillNotes) Prefilled(worker string, keys []uint64) { r[worker] += len(keys) }

// TestKVAwareL2AndRouteNotes: a prefix only the shared L2 holds is credited
// to every worker as L2 blocks (so a busy worker holding part of it in GPU
// loses to an idle one fetching it all from L2), the decision says which
// tier it credited, and the chosen worker is told the prompt's keys once
// its prefill ended.
func TestKVAwareL2AndRouteNotes(t *testing.T) {
	prompt := tokenIDs(3, 16*32)
	keys := kvindex.AppendKeys(nil, kvindex.Seed("m", ""), prompt, 16)
	x := kvindex.New(1 << 10)
	e := kvEPs(2, 0)
	x.Add(e[0].ID, kvindex.GPU, keys[:8])
	notes := prefillNotes{}
	s, err := New(Config{Name: NameKVAware}, WithIndex(x), WithL2(fixedL2{"m", 16 * 32}), WithPrefillNotes(notes))
	if err != nil {
		t.Fatal(err)
	}
	d, err := s.Pick(&Request{Model: "m", TokenIDs: prompt}, e)
	if err != nil {
		t.Fatal(err)
	}
	if d.Endpoint != e[1].ID || d.TierBlocks != [3]int{0, 0, 32} || d.PrefillTokens <= 0 || d.PrefillTokens >= len(prompt)/2 {
		t.Fatalf("decision %+v: want the idle worker, all 32 blocks credited to L2, and the fetch's work priced at under half the prompt's prefill (the timing model: 40%%)", d)
	}
	if len(notes) != 0 || len(d.Keys) != 32 {
		t.Fatalf("route notes %v before the prefill ended, decision keys %d: want none yet, and the prompt's 32 keys", notes, len(d.Keys))
	}
	s.(PrefillObserver).Prefilled(d.Endpoint, d.Keys)
	if notes[e[1].ID] != 32 || len(notes) != 1 {
		t.Fatalf("route notes %v: want the chosen worker told its 32 keys once its prefill ended", notes)
	}
	// Another model's prompt is not credited.
	d, _ = s.Pick(&Request{Model: "other", TokenIDs: prompt}, kvEPs(0, 0))
	if d.TierBlocks[2] != 0 {
		t.Fatalf("another model's prompt credited with L2 blocks: %+v", d)
	}
}

// TestKVAwareLearnsAnL2ThatSaysNothing: with an L2 that publishes nothing
// (Redis), a prompt prefilled on one worker is credited from the L2 to
// every worker afterwards, so a busy worker's prompt can go to an idle one.
func TestKVAwareLearnsAnL2ThatSaysNothing(t *testing.T) {
	learner, err := l2learn.New(l2learn.Config{CapacityTokens: 1 << 16})
	if err != nil {
		t.Fatal(err)
	}
	x := kvindex.New(1 << 10)
	s, err := New(Config{Name: NameKVAware}, WithIndex(x), WithL2(learner))
	if err != nil {
		t.Fatal(err)
	}
	prompt := tokenIDs(5, 16*32) // two 256-token chunks
	e := kvEPs(0, 0)
	d, err := s.Pick(&Request{Model: "m", TokenIDs: prompt}, e)
	if err != nil || d.TierBlocks[2] != 0 || len(d.Keys) != 32 {
		t.Fatalf("first decision %+v, %v: want nothing credited and the prompt's keys", d, err)
	}
	s.(PrefillObserver).Prefilled(d.Endpoint, d.Keys)
	busy := kvEPs(0, 0)
	for i := range busy {
		if busy[i].ID == d.Endpoint {
			busy[i].PendingPrefill = 4000
		}
	}
	d2, err := s.Pick(&Request{Model: "m", TokenIDs: prompt}, busy)
	if err != nil {
		t.Fatal(err)
	}
	if d2.Endpoint == d.Endpoint || d2.TierBlocks[2] != 32 {
		t.Fatalf("second decision %+v: want the idle worker, all 32 blocks from the L2", d2)
	}
}

// TestKVAwareAffinitySlack: a worker whose caches save a long prompt more
// than the others' may carry one more request than the load guard allows;
// a prefix every worker holds earns nobody slack.
func TestKVAwareAffinitySlack(t *testing.T) {
	prompt := tokenIDs(3, 16*512) // 8,192 tokens: two AffinityTokens of lead
	keys := kvindex.AppendKeys(nil, kvindex.Seed("m", ""), prompt, 16)
	tests := []struct {
		name     string
		cfg      KVAwareConfig
		everyone bool // every worker holds the prompt
		pending  int  // prompt tokens queued at the worker holding it
		loads    []int
		wantHot  bool // the worker holding the prompt (e[0]) is picked
	}{
		{"a long cached prompt earns one more request", KVAwareConfig{}, false, 0, []int{2, 0, 0}, true},
		{"but not two", KVAwareConfig{}, false, 0, []int{3, 0, 0}, false},
		{"two when configured", KVAwareConfig{MaxAffinitySlack: 2}, false, 0, []int{3, 0, 0}, true},
		{"a prefix every worker holds earns none", KVAwareConfig{}, true, 0, []int{2, 0, 0}, false},
		{"a holder busy prefilling earns none", KVAwareConfig{}, false, 6000, []int{2, 0, 0}, false},
		{"a little prefill queued does not cancel the lead", KVAwareConfig{}, false, 1000, []int{2, 0, 0}, true},
		{"off", KVAwareConfig{AffinityTokens: -1}, false, 0, []int{2, 0, 0}, false},
		{"a lead shorter than affinityTokens earns none", KVAwareConfig{AffinityTokens: 16384}, false, 0, []int{2, 0, 0}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x := kvindex.New(1 << 12)
			e := kvEPs(tt.loads...)
			x.Add(e[0].ID, kvindex.GPU, keys)
			e[0].PendingPrefill = tt.pending
			if tt.everyone {
				for _, ep := range e[1:] {
					x.Add(ep.ID, kvindex.GPU, keys)
				}
			}
			k := NewKVAware(tt.cfg, LoadGuardConfig{Window: 1, Ratio: 0.2}, x, NewPrefixAware(PrefixAwareConfig{}, LoadGuardConfig{}))
			d, err := k.Pick(&Request{Model: "m", TokenIDs: prompt}, e)
			if err != nil {
				t.Fatal(err)
			}
			if hot := d.Endpoint == e[0].ID; hot != tt.wantHot {
				t.Errorf("picked %s (loads %v); picked the worker holding the prompt: %v, want %v", d.Endpoint, tt.loads, hot, tt.wantHot)
			}
		})
	}
}

// learningL2 records what kvaware teaches an L2 learner.
type learningL2 struct {
	fixedL2
	keys, block int
}

func (l *learningL2) Learn(keys []uint64, block int) { l.keys, l.block = len(keys), block }

// TestKVAwareTeachesTheL2LearnerItsBlockSize: the learner hears a
// prefilled prompt's keys with the block size they were computed at (the
// chosen worker's), which it hashes prompts at in turn; it assumed 16.
func TestKVAwareTeachesTheL2LearnerItsBlockSize(t *testing.T) {
	for _, bs := range []int{16, 32} {
		l := &learningL2{fixedL2: fixedL2{"m", 0}}
		s, err := New(Config{Name: NameKVAware}, WithIndex(kvindex.New(1<<10)), WithL2(l))
		if err != nil {
			t.Fatal(err)
		}
		e := kvEPs(0, 0)
		for i := range e {
			e[i].BlockSize = bs
		}
		d, err := s.Pick(&Request{Model: "m", TokenIDs: tokenIDs(5, 512)}, e)
		if err != nil {
			t.Fatal(err)
		}
		s.(PrefillObserver).Prefilled(d.Endpoint, d.Keys)
		if l.block != bs || l.keys != 512/bs {
			t.Errorf("blocks of %d: the learner heard %d keys of %d tokens, want %d of %d", bs, l.keys, l.block, 512/bs, bs)
		}
	}
}

// TestKVAwareDerivedTierCredits: with no weights set, a tier's credit is
// the share of the prompt's prefill compute loading from it saves, from
// the timing model. For an 8,192-token document every worker can fetch
// from the L2, an 8B model on an H100 saves 64% by fetching it, so the
// worker holding it in GPU leads the others by 36% of it (2,950 tokens):
// less than affinityTokens, so the guard keeps its balance; the old fixed
// L2 weight, 0.5, made the lead exactly 4,096 tokens and the busier
// holder won.
func TestKVAwareDerivedTierCredits(t *testing.T) {
	prompt := tokenIDs(3, 16*512)
	keys := kvindex.AppendKeys(nil, kvindex.Seed("m", ""), prompt, 16)
	fixed := KVAwareConfig{GPUWeight: 1, CPUWeight: 0.8, L2Weight: 0.5}
	tests := []struct {
		name    string
		cfg     KVAwareConfig
		tier    kvindex.Tier // where the holder (e[0]) has the prompt
		l2      bool         // the shared L2 holds it for everyone
		loads   []int
		wantHot bool
	}{
		{"derived: an L2 fetch is close enough to follow the guard", KVAwareConfig{}, kvindex.GPU, true, []int{2, 0, 0}, false},
		{"fixed 0.5: the holder earned the slack", fixed, kvindex.GPU, true, []int{2, 0, 0}, true},
		{"derived: without the L2 the holder still leads", KVAwareConfig{}, kvindex.GPU, false, []int{2, 0, 0}, true},
		{"derived: an L1 copy leads an L2 fetch by under a slack", KVAwareConfig{}, kvindex.CPU, true, []int{2, 0, 0}, false},
		{"derived: an L1 copy beats an L2 fetch at equal load", KVAwareConfig{}, kvindex.CPU, true, []int{0, 0, 0}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x := kvindex.New(1 << 12)
			e := kvEPs(tt.loads...)
			x.Add(e[0].ID, tt.tier, keys)
			opts := []Option{WithIndex(x)}
			if tt.l2 {
				opts = append(opts, WithL2(fixedL2{"m", len(prompt)}))
			}
			s, err := New(Config{Name: NameKVAware, KVAware: tt.cfg, LoadGuard: LoadGuardConfig{Window: 1, Ratio: 0.2}}, opts...)
			if err != nil {
				t.Fatal(err)
			}
			d, err := s.Pick(&Request{Model: "m", TokenIDs: prompt}, e)
			if err != nil {
				t.Fatal(err)
			}
			if hot := d.Endpoint == e[0].ID; hot != tt.wantHot {
				t.Errorf("picked %s (loads %v, %+v); picked the holder: %v, want %v", d.Endpoint, tt.loads, d.TierBlocks, hot, tt.wantHot)
			}
		})
	}
}

// TestKVAwareSpreadsNewContent: prompts nothing caches, arriving at an
// idle fleet, cost the same everywhere. Left to the tie-break's hash they
// pile up by chance (on the demo's long documents, five of twelve on one
// of four workers, past what its caches hold, so their follow-ups
// missed); the worker whose caches took the least new content takes the
// next.
func TestKVAwareSpreadsNewContent(t *testing.T) {
	x := kvindex.New(1 << 12)
	k := NewKVAware(KVAwareConfig{}, LoadGuardConfig{Window: 1, Ratio: 0.2}, x, NewPrefixAware(PrefixAwareConfig{}, LoadGuardConfig{}))
	e := kvEPs(0, 0, 0, 0)
	per := map[string]int{}
	for doc := range 40 {
		d, err := k.Pick(&Request{Model: "m", TokenIDs: tokenIDs(uint64(100+doc), 2048)}, e)
		if err != nil {
			t.Fatal(err)
		}
		per[d.Endpoint]++
	}
	for _, ep := range e {
		if per[ep.ID] != 10 {
			t.Fatalf("new documents per worker %v: want 10 each", per)
		}
	}
	// A worker that left and came back starts again from nothing.
	k.Forget(e[0].ID)
	if d, _ := k.Pick(&Request{Model: "m", TokenIDs: tokenIDs(200, 2048)}, e); d.Endpoint != e[0].ID {
		t.Fatalf("picked %s, want the forgotten worker %s, whose caches took nothing since", d.Endpoint, e[0].ID)
	}
}

// TestKVAwareQueueAtFullWeightForWhatTheL2Holds: the lean towards affinity
// (queueWeight below 1) spares the fleet a second prefill of a prefix its
// holder is too busy for; a prefix the shared L2 holds costs any worker a
// fetch, not a prefill, so the prefill queued at its holder is priced at
// full weight. A follow-up whose document's holder is prefilling another
// 8K document goes to an idle worker and fetches its document from the L2
// (it waited the whole other prefill before); without the L2 it still
// waits at the holder, as computing the document again would take longer.
func TestKVAwareQueueAtFullWeightForWhatTheL2Holds(t *testing.T) {
	prompt := tokenIDs(9, 16*514) // an 8K document and a question
	keys := kvindex.AppendKeys(nil, kvindex.Seed("m", ""), prompt, 16)
	for _, tt := range []struct {
		name    string
		l2      bool
		wantHot bool
	}{
		{"the L2 holds the document", true, false},
		{"only the holder does", false, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			x := kvindex.New(1 << 12)
			e := kvEPs(1, 0, 0)
			x.Add(e[0].ID, kvindex.GPU, keys[:512])
			e[0].PendingPrefill = 8224
			opts := []Option{WithIndex(x)}
			if tt.l2 {
				opts = append(opts, WithL2(fixedL2{"m", 8192}))
			}
			s, err := New(Config{Name: NameKVAware, LoadGuard: LoadGuardConfig{Window: 1, Ratio: 0.2}}, opts...)
			if err != nil {
				t.Fatal(err)
			}
			d, err := s.Pick(&Request{Model: "m", TokenIDs: prompt}, e)
			if err != nil {
				t.Fatal(err)
			}
			if hot := d.Endpoint == e[0].ID; hot != tt.wantHot {
				t.Errorf("picked %s (%+v); picked the busy holder: %v, want %v", d.Endpoint, d.TierBlocks, hot, tt.wantHot)
			}
		})
	}
}

// TestPredictionsOutliveTheStrategy: the router hands one set of
// predictions to every kvaware it builds, so a configuration reload, which
// builds a new one, still credits the blocks routed requests are
// computing; a kvaware with its own set starts with none.
func TestPredictionsOutliveTheStrategy(t *testing.T) {
	x := kvindex.New(1 << 10)
	preds := NewPredictions()
	build := func(cfg Config, shared bool) Strategy {
		t.Helper()
		opts := []Option{WithIndex(x)}
		if shared {
			opts = append(opts, WithPredictions(preds))
		}
		s, err := New(cfg, opts...)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	e := kvEPs(0, 0, 0, 0)
	prompt := tokenIDs(21, 16*8)
	first, err := build(Config{Name: NameKVAware}, true).Pick(&Request{Model: "m", TokenIDs: prompt}, e)
	if err != nil {
		t.Fatal(err)
	}
	reloaded := Config{Name: NameKVAware, KVAware: KVAwareConfig{QueueWeight: 0.5}}
	for _, tt := range []struct {
		name   string
		shared bool
		want   int
	}{{"shared", true, 8}, {"own", false, 0}} {
		d, err := build(reloaded, tt.shared).Pick(&Request{Model: "m", TokenIDs: prompt}, e)
		if err != nil {
			t.Fatal(err)
		}
		if d.MatchedChunks != tt.want || (tt.want > 0 && d.Endpoint != first.Endpoint) {
			t.Errorf("%s predictions: %+v after the rebuild, want %d blocks credited on %s", tt.name, d, tt.want, first.Endpoint)
		}
	}
	preds.Confirm(first.Endpoint, kvindex.AppendKeys(nil, kvindex.Seed("m", ""), prompt, 16))
	if n := preds.Len(); n != 0 {
		t.Errorf("%d predicted keys after the worker's events confirmed them all, want 0", n)
	}
}

// TestKVAwareColdHead: a prompt's head is enough to route it only when no
// worker holds, is computing or can fetch its first block; then Pick on
// the head (PromptTokens estimating the whole) chooses the worker Pick on
// the whole would, with the same prefill work.
func TestKVAwareColdHead(t *testing.T) {
	whole := tokenIDs(21, 8192)
	head := whole[:1024]
	keys := kvindex.AppendKeys(nil, kvindex.Seed("m", ""), whole, 16)
	tests := []struct {
		name  string
		head  []uint32
		l2    L2View
		setup func(k *KVAware, x *kvindex.Index, e []Endpoint)
		cold  bool
	}{
		{"nothing anywhere", head, nil, nil, true},
		{"a worker holds the first block on its GPU", head, nil, func(_ *KVAware, x *kvindex.Index, e []Endpoint) {
			x.Add(e[2].ID, kvindex.GPU, keys[:1])
		}, false},
		{"a worker holds it in its L1", head, nil, func(_ *KVAware, x *kvindex.Index, e []Endpoint) {
			x.Add(e[1].ID, kvindex.CPU, keys[:3])
		}, false},
		{"a worker is computing it", head, nil, func(k *KVAware, _ *kvindex.Index, e []Endpoint) {
			k.preds.add(keys[:1], e[3].ID, k.now(), k.now().Add(time.Minute))
		}, false},
		{"a later block only proves nothing of the first", head, nil, func(_ *KVAware, x *kvindex.Index, e []Endpoint) {
			x.Add(e[0].ID, kvindex.GPU, keys[5:9])
		}, true},
		{"the L2 holds the first chunk", head, fixedL2{model: "m", n: 256}, nil, false},
		{"the L2 holds nothing of it", head, fixedL2{model: "other", n: 256}, nil, true},
		{"a head shorter than an L2 chunk", whole[:200], fixedL2{model: "other", n: 256}, nil, false},
		{"a head shorter than a block", whole[:10], nil, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			build := func() (*KVAware, *kvindex.Index, []Endpoint) {
				x := kvindex.New(1 << 12)
				k := NewKVAware(KVAwareConfig{}, LoadGuardConfig{Window: 1}, x, NewPrefixAware(PrefixAwareConfig{}, LoadGuardConfig{}))
				k.now = func() time.Time { return time.Unix(1000, 0) }
				k.l2 = tt.l2
				e := kvEPs(1, 0, 2, 0)
				e[1].PendingPrefill, e[3].PendingPrefill = 300, 200
				if tt.setup != nil {
					tt.setup(k, x, e)
				}
				return k, x, e
			}
			k, _, e := build()
			if got := k.Cold(&Request{Model: "m", TokenIDs: tt.head}, e); got != tt.cold {
				t.Fatalf("Cold = %v, want %v", got, tt.cold)
			}
			if !tt.cold {
				return
			}
			onHead, err := k.Pick(&Request{Model: "m", TokenIDs: tt.head, PromptTokens: len(whole)}, e)
			if err != nil {
				t.Fatal(err)
			}
			k2, _, e2 := build()
			onWhole, err := k2.Pick(&Request{Model: "m", TokenIDs: whole}, e2)
			if err != nil {
				t.Fatal(err)
			}
			if onHead.Endpoint != onWhole.Endpoint || onHead.PrefillTokens != onWhole.PrefillTokens || onHead.Fallback != onWhole.Fallback {
				t.Fatalf("on the head: %s, %d tokens, fallback %q; on the whole: %s, %d, %q",
					onHead.Endpoint, onHead.PrefillTokens, onHead.Fallback, onWhole.Endpoint, onWhole.PrefillTokens, onWhole.Fallback)
			}
		})
	}
}

// TestKVAwareCompletedPredictsTheWhole: once a prompt routed on its head is
// encoded whole, its worker is credited with all of it, so a sibling sent
// while it prefills follows it there — a busy worker holding only the
// head's blocks would lose it to an idle one, and the document would be
// prefilled twice. The decision's keys become the whole prompt's.
func TestKVAwareCompletedPredictsTheWhole(t *testing.T) {
	doc := tokenIDs(31, 8192)
	question := func(seed uint64) []uint32 {
		return append(doc[:len(doc):len(doc)], tokenIDs(seed, 32)...)
	}
	for _, complete := range []bool{false, true} {
		x := kvindex.New(1 << 12)
		notes := prefillNotes{}
		k := NewKVAware(KVAwareConfig{}, LoadGuardConfig{Window: 1}, x, NewPrefixAware(PrefixAwareConfig{}, LoadGuardConfig{}))
		k.notes = notes
		e := kvEPs(0, 0, 0, 0)
		first := question(1)
		d, err := k.Pick(&Request{Model: "m", TokenIDs: first[:1024], PromptTokens: 8000}, e)
		if err != nil {
			t.Fatal(err)
		}
		if complete {
			d = k.Completed(&Request{Model: "m", TokenIDs: first}, d, 8000)
			if want := len(first) / 16; len(d.Keys) != want || d.TotalChunks != want {
				t.Fatalf("completed decision: %d keys, %d chunks; want %d", len(d.Keys), d.TotalChunks, want)
			}
		}
		// The first question is prefilling at its worker.
		for i := range e {
			if e[i].ID == d.Endpoint {
				e[i].InFlight, e[i].PendingPrefill = 1, d.PrefillTokens
			}
		}
		sibling, err := k.Pick(&Request{Model: "m", TokenIDs: question(2)}, e)
		if err != nil {
			t.Fatal(err)
		}
		if got := sibling.Endpoint == d.Endpoint; got != complete {
			t.Fatalf("completed %v: sibling followed the first question: %v (matched %d of %d blocks)", complete, got, sibling.MatchedChunks, sibling.TotalChunks)
		}
	}
}
