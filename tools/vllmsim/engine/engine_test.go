package engine

import (
	"fmt"
	"testing"

	"github.com/warmpath/warmpath/libs/blockhash"
	"github.com/warmpath/warmpath/libs/timing"
	"github.com/warmpath/warmpath/tools/vllmsim/kvblock"
)

func testModel(t testing.TB) timing.Model {
	t.Helper()
	p, err := timing.Lookup(timing.DefaultPreset)
	if err != nil {
		t.Fatal(err)
	}
	m, err := timing.NewModel(p)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func newEngine(t testing.TB, mod func(*Config)) *Engine {
	t.Helper()
	h, err := blockhash.New("0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		BlockSize: 16, NumGPUBlocks: 64, MaxNumSeqs: 8, MaxNumBatchedTokens: 512,
		MaxModelLen: 1024, EnablePrefixCaching: true, Timing: testModel(t), Hasher: h,
	}
	if mod != nil {
		mod(&cfg)
	}
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func prompt(seed, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(seed*100000 + i)
	}
	return out
}

// run steps the engine until idle and returns every step result.
func run(t testing.TB, e *Engine, now float64) ([]StepResult, float64) {
	t.Helper()
	var steps []StepResult
	for i := 0; e.HasWork(); i++ {
		if i > 100000 {
			t.Fatal("engine did not drain")
		}
		res := e.Step(now)
		if res.Duration == 0 && len(res.Outputs) == 0 {
			t.Fatalf("step %d made no progress with %d running, %d waiting", i, e.NumRunning(), e.NumWaiting())
		}
		now += res.Duration
		steps = append(steps, res)
	}
	return steps, now
}

func TestPrefixHitOnRepeat(t *testing.T) {
	// Long enough that prefill is compute-bound: below ~300 tokens a step
	// on an H100 is bound by reading the weights, hit or not.
	e := newEngine(t, func(c *Config) { c.NumGPUBlocks = 256; c.MaxNumBatchedTokens = 2048 })
	a := &Request{ID: "a", Prompt: prompt(1, 1000), MaxTokens: 4}
	if err := e.Add(a); err != nil {
		t.Fatal(err)
	}
	_, now := run(t, e, 0)
	b := &Request{ID: "b", Prompt: prompt(1, 1000), MaxTokens: 4, Arrival: now}
	if err := e.Add(b); err != nil {
		t.Fatal(err)
	}
	run(t, e, now)

	if got := a.Stats.CachedTokens; got != 0 {
		t.Errorf("first request cached tokens = %d, want 0", got)
	}
	// 1000 tokens = 62 full blocks of 16 (992 tokens); the 63rd is partial.
	if got, want := b.Stats.CachedTokens, 992; got != want {
		t.Errorf("repeat cached tokens = %d, want %d", got, want)
	}
	ttftA := a.Stats.FirstToken - a.Arrival
	ttftB := b.Stats.FirstToken - b.Arrival
	if !(ttftB < ttftA) {
		t.Errorf("repeat TTFT = %v, want < first TTFT %v", ttftB, ttftA)
	}
	if got, want := len(b.Output()), 4; got != want {
		t.Errorf("repeat generated %d tokens, want %d", got, want)
	}
	c := e.Counters()
	if c.PrefixQueries != 2000 || c.PrefixHits != 992 {
		t.Errorf("counters queries=%d hits=%d, want 2000 and 992", c.PrefixQueries, c.PrefixHits)
	}
}

func TestFullPromptHitRecomputesLastToken(t *testing.T) {
	e := newEngine(t, nil)
	for i, id := range []string{"a", "b"} {
		r := &Request{ID: id, Prompt: prompt(1, 64), MaxTokens: 1}
		if err := e.Add(r); err != nil {
			t.Fatal(err)
		}
		run(t, e, float64(i))
		// 64 tokens = 4 full blocks; at most 63 may hit, so only 3 blocks do.
		if want := []int{0, 48}[i]; r.Stats.CachedTokens != want {
			t.Errorf("%s cached = %d, want %d", id, r.Stats.CachedTokens, want)
		}
	}
}

func TestCacheSaltIsolates(t *testing.T) {
	e := newEngine(t, nil)
	a := &Request{ID: "a", Prompt: prompt(1, 100), MaxTokens: 1, Extra: []string{"tenant-a"}}
	b := &Request{ID: "b", Prompt: prompt(1, 100), MaxTokens: 1, Extra: []string{"tenant-b"}}
	for _, r := range []*Request{a, b} {
		if err := e.Add(r); err != nil {
			t.Fatal(err)
		}
		run(t, e, 0)
	}
	if b.Stats.CachedTokens != 0 {
		t.Errorf("salted request hit %d tokens of another salt, want 0", b.Stats.CachedTokens)
	}
}

func TestEvictionOrderIsLRU(t *testing.T) {
	// 14 blocks: each request of 64 prompt + 1 output holds 4 blocks (the
	// output token's KV is never computed), so three fit with 2 to spare.
	e := newEngine(t, func(c *Config) { c.NumGPUBlocks = 14; c.MaxModelLen = 128 })
	var events []kvblock.Event
	now := 0.0
	for i := 1; i <= 3; i++ {
		r := &Request{ID: fmt.Sprint(i), Prompt: prompt(i, 64), MaxTokens: 1, Arrival: now}
		if err := e.Add(r); err != nil {
			t.Fatal(err)
		}
		var steps []StepResult
		steps, now = run(t, e, now)
		for _, s := range steps {
			events = append(events, s.Events...)
		}
	}
	for _, ev := range events {
		if ev.Kind == kvblock.Removed {
			t.Fatalf("eviction before the pool was full: %+v", ev)
		}
	}
	// The 4th request needs 4 blocks: the 2 never-used ones, then 2 evicted
	// from request 1 (least recently freed), tail first.
	hasher, _ := blockhash.New("0")
	want1 := hasher.Chain(prompt(1, 64), 16, nil)
	r := &Request{ID: "4", Prompt: prompt(4, 64), MaxTokens: 1, Arrival: now}
	if err := e.Add(r); err != nil {
		t.Fatal(err)
	}
	steps, _ := run(t, e, now)
	var removed []blockhash.Hash
	for _, s := range steps {
		for _, ev := range s.Events {
			if ev.Kind == kvblock.Removed {
				removed = append(removed, ev.Hashes...)
			}
		}
	}
	wantOrder := []blockhash.Hash{want1[3], want1[2]}
	if len(removed) != len(wantOrder) {
		t.Fatalf("removed %d blocks, want %d", len(removed), len(wantOrder))
	}
	for i := range wantOrder {
		if removed[i] != wantOrder[i] {
			t.Fatalf("removal %d is not request 1's block %d (tail first)", i, 3-i)
		}
	}
	// Request 2 is still fully cached.
	r2 := &Request{ID: "2b", Prompt: prompt(2, 64), MaxTokens: 1}
	if err := e.Add(r2); err != nil {
		t.Fatal(err)
	}
	run(t, e, now+1)
	if r2.Stats.CachedTokens != 48 {
		t.Errorf("request 2 repeat cached %d tokens, want 48", r2.Stats.CachedTokens)
	}
}

func TestBatchingLimits(t *testing.T) {
	tests := []struct {
		name          string
		maxSeqs       int
		maxBatched    int
		n, promptLen  int
		wantMaxSeqs   int
		wantMinChunks int // steps with prefill for the first request
	}{
		{name: "max_num_seqs caps running", maxSeqs: 2, maxBatched: 4096, n: 6, promptLen: 40, wantMaxSeqs: 2},
		{name: "token budget chunks prefill", maxSeqs: 8, maxBatched: 64, n: 1, promptLen: 300, wantMaxSeqs: 1, wantMinChunks: 5},
		{name: "mixed", maxSeqs: 4, maxBatched: 100, n: 10, promptLen: 90, wantMaxSeqs: 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEngine(t, func(c *Config) {
				c.MaxNumSeqs, c.MaxNumBatchedTokens, c.NumGPUBlocks = tt.maxSeqs, tt.maxBatched, 512
			})
			reqs := make([]*Request, tt.n)
			for i := range reqs {
				reqs[i] = &Request{ID: fmt.Sprint(i), Prompt: prompt(i+1, tt.promptLen), MaxTokens: 8}
				if err := e.Add(reqs[i]); err != nil {
					t.Fatal(err)
				}
			}
			steps, _ := run(t, e, 0)
			maxSeqs, chunks := 0, 0
			for _, s := range steps {
				if s.PrefillTokens+s.DecodeTokens > tt.maxBatched {
					t.Fatalf("step scheduled %d tokens, budget %d", s.PrefillTokens+s.DecodeTokens, tt.maxBatched)
				}
				maxSeqs = max(maxSeqs, s.ScheduledSeqs)
				if s.PrefillTokens > 0 && s.Outputs == nil {
					chunks++
				}
			}
			if maxSeqs > tt.wantMaxSeqs {
				t.Errorf("max scheduled seqs = %d, want ≤ %d", maxSeqs, tt.wantMaxSeqs)
			}
			if tt.wantMaxSeqs > 1 && maxSeqs < 2 {
				t.Errorf("max scheduled seqs = %d: no batching happened", maxSeqs)
			}
			if chunks+1 < tt.wantMinChunks {
				t.Errorf("prefill took %d chunked steps, want ≥ %d", chunks+1, tt.wantMinChunks)
			}
			for _, r := range reqs {
				if len(r.Output()) != 8 || r.Status() != Finished {
					t.Errorf("request %s: %d tokens, status %d; want 8, finished", r.ID, len(r.Output()), r.Status())
				}
			}
		})
	}
}

func TestPreemptionUnderMemoryPressure(t *testing.T) {
	// 12 blocks of 16 = 192 tokens; 3 requests of 48 prompt + 40 output need
	// 6 blocks each at the end, so someone must be preempted.
	e := newEngine(t, func(c *Config) { c.NumGPUBlocks = 12; c.MaxModelLen = 128 })
	reqs := make([]*Request, 3)
	for i := range reqs {
		reqs[i] = &Request{ID: fmt.Sprint(i), Prompt: prompt(i+1, 48), MaxTokens: 40}
		if err := e.Add(reqs[i]); err != nil {
			t.Fatal(err)
		}
	}
	run(t, e, 0)
	if e.Counters().Preemptions == 0 {
		t.Fatal("no preemption under memory pressure")
	}
	for _, r := range reqs {
		if len(r.Output()) != 40 {
			t.Errorf("request %s generated %d tokens, want 40", r.ID, len(r.Output()))
		}
	}
	if got := e.Pool().NumFree(); got != 12 {
		t.Errorf("free blocks after drain = %d, want 12", got)
	}
}

// TestEventsDescribePool replays the engine's events into a reference-
// counted set and checks it equals the pool's cached blocks at every step.
func TestEventsDescribePool(t *testing.T) {
	e := newEngine(t, func(c *Config) { c.NumGPUBlocks = 40; c.MaxModelLen = 256 })
	live := map[blockhash.Hash]int{}
	now := 0.0
	for i := range 30 {
		// Shared system prefix plus a unique tail, so hits, duplicates and
		// evictions all happen.
		p := append(prompt(0, 48), prompt(i%7+1, 40)...)
		if err := e.Add(&Request{ID: fmt.Sprint(i), Prompt: p, MaxTokens: 20, Arrival: now}); err != nil {
			t.Fatal(err)
		}
		for range 3 {
			res := e.Step(now)
			now += res.Duration
			apply(t, live, res.Events)
		}
	}
	for e.HasWork() {
		res := e.Step(now)
		now += res.Duration
		apply(t, live, res.Events)
	}
	total := 0
	for _, n := range live {
		total += n
	}
	if got := e.Pool().NumCached(); got != total {
		t.Fatalf("events say %d cached blocks, pool holds %d", total, got)
	}
}

func apply(t *testing.T, live map[blockhash.Hash]int, events []kvblock.Event) {
	t.Helper()
	for _, ev := range events {
		switch ev.Kind {
		case kvblock.Stored:
			if len(ev.Tokens) != len(ev.Hashes)*ev.BlockSize {
				t.Fatalf("stored event with %d tokens for %d blocks", len(ev.Tokens), len(ev.Hashes))
			}
			for _, h := range ev.Hashes {
				live[h]++
			}
		case kvblock.Removed:
			for _, h := range ev.Hashes {
				if live[h] == 0 {
					t.Fatal("removal of a block never stored")
				}
				live[h]--
				if live[h] == 0 {
					delete(live, h)
				}
			}
		case kvblock.Cleared:
			clear(live)
		}
	}
}

type fakeConnector struct{ hit int }

func (f *fakeConnector) Lookup([]uint32, []string) Hit { return Hit{CPU: f.hit} }
func (f *fakeConnector) Store([]uint32, []string)      {}

func TestConnectorHitIsLoadedNotPrefilled(t *testing.T) {
	e := newEngine(t, func(c *Config) { c.Connector = &fakeConnector{hit: 512}; c.MaxNumBatchedTokens = 2048 })
	miss := newEngine(t, func(c *Config) { c.MaxNumBatchedTokens = 2048 })
	a := &Request{ID: "a", Prompt: prompt(1, 600), MaxTokens: 1}
	b := &Request{ID: "a", Prompt: prompt(1, 600), MaxTokens: 1}
	if err := e.Add(a); err != nil {
		t.Fatal(err)
	}
	if err := miss.Add(b); err != nil {
		t.Fatal(err)
	}
	stepsHit, _ := run(t, e, 0)
	run(t, miss, 0)
	if a.Stats.ExternalTokens != 512 || a.Stats.ExternalCPU != 512 {
		t.Errorf("external tokens = %d (cpu %d), want 512", a.Stats.ExternalTokens, a.Stats.ExternalCPU)
	}
	if stepsHit[0].PrefillTokens != 600-512 || stepsHit[0].LoadedTokens != 512 {
		t.Errorf("first step prefilled %d and loaded %d, want 88 and 512", stepsHit[0].PrefillTokens, stepsHit[0].LoadedTokens)
	}
	if !(a.Stats.FirstToken < b.Stats.FirstToken) {
		t.Errorf("TTFT with L1 hit %v, want < without %v", a.Stats.FirstToken, b.Stats.FirstToken)
	}
}

// fetchingConnector holds cpu tokens in L1 and remote after them in L2,
// of which only fetchable arrive when fetched, in secs.
type fetchingConnector struct {
	cpu, remote, fetchable int
	secs                   float64
	calls                  [][2]int
}

func (f *fetchingConnector) Lookup([]uint32, []string) Hit { return Hit{CPU: f.cpu, Remote: f.remote} }
func (f *fetchingConnector) Store([]uint32, []string)      {}
func (f *fetchingConnector) FetchRemote(_ []uint32, _ []string, start, end int) (int, float64) {
	f.calls = append(f.calls, [2]int{start, end})
	return min(start+f.fetchable, end), f.secs
}

func TestFetcherChargesMeasuredNetworkTime(t *testing.T) {
	tests := []struct {
		name                  string
		conn                  fetchingConnector
		wantRemote, wantStart int
		wantFetch             float64
	}{
		{"all arrive", fetchingConnector{cpu: 256, remote: 256, fetchable: 256, secs: 0.5}, 256, 256, 0.5},
		{"partial", fetchingConnector{cpu: 256, remote: 256, fetchable: 128, secs: 0.25}, 128, 256, 0.25},
		{"nothing arrives", fetchingConnector{cpu: 0, remote: 512, fetchable: 0, secs: 0.1}, 0, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn := tt.conn
			e := newEngine(t, func(c *Config) { c.Connector = &conn; c.MaxNumBatchedTokens = 2048 })
			r := &Request{ID: "a", Prompt: prompt(1, 600), MaxTokens: 1}
			if err := e.Add(r); err != nil {
				t.Fatal(err)
			}
			res := e.Step(0)
			if len(conn.calls) != 1 || conn.calls[0] != [2]int{tt.wantStart, tt.conn.cpu + tt.conn.remote} {
				t.Fatalf("fetch calls %v, want one from %d to %d", conn.calls, tt.wantStart, tt.conn.cpu+tt.conn.remote)
			}
			if r.Stats.ExternalRemote != tt.wantRemote || r.Stats.FetchSeconds != tt.wantFetch {
				t.Fatalf("remote tokens %d fetched in %vs, want %d in %vs", r.Stats.ExternalRemote, r.Stats.FetchSeconds, tt.wantRemote, tt.wantFetch)
			}
			// The step costs the modelled PCIe copy of every loaded token plus
			// the measured network time; the prefill covers the rest.
			loaded := tt.conn.cpu + tt.wantRemote
			want := testModel(t).StepSeconds(timing.Batch{
				Prefill:      []timing.Chunk{{Start: loaded, N: 600 - loaded}},
				LoadTokens:   [2]int{loaded, 0},
				FetchSeconds: tt.wantFetch,
			})
			if res.Duration != want || res.PrefillTokens != 600-loaded {
				t.Fatalf("step %vs prefilling %d, want %vs prefilling %d", res.Duration, res.PrefillTokens, want, 600-loaded)
			}
		})
	}
}

func TestFetchWaitsForAdmission(t *testing.T) {
	// 64 blocks of 16: the first request's 600 tokens take 38, so the
	// second cannot be admitted and must not fetch until the first ends.
	conn := fetchingConnector{cpu: 0, remote: 512, fetchable: 512, secs: 0.01}
	e := newEngine(t, func(c *Config) { c.Connector = &conn; c.NumGPUBlocks = 64; c.MaxNumBatchedTokens = 4096 })
	for _, id := range []string{"a", "b"} {
		if err := e.Add(&Request{ID: id, Prompt: prompt(len(id)+int(id[0]), 600), MaxTokens: 4}); err != nil {
			t.Fatal(err)
		}
	}
	e.Step(0)
	if len(conn.calls) != 1 || e.NumWaiting() != 1 {
		t.Fatalf("after one step: %d fetches, %d waiting; want 1 fetch (the admitted request) and 1 waiting", len(conn.calls), e.NumWaiting())
	}
	run(t, e, 1)
	if len(conn.calls) != 2 {
		t.Fatalf("%d fetches in all, want one per request", len(conn.calls))
	}
}

func TestAddValidation(t *testing.T) {
	e := newEngine(t, nil)
	tests := []struct {
		name string
		r    *Request
	}{
		{"empty prompt", &Request{ID: "x", MaxTokens: 1}},
		{"zero max tokens", &Request{ID: "x", Prompt: prompt(1, 4)}},
		{"too long", &Request{ID: "x", Prompt: prompt(1, 1000), MaxTokens: 100}},
	}
	for _, tt := range tests {
		if err := e.Add(tt.r); err == nil {
			t.Errorf("%s: Add accepted it", tt.name)
		}
	}
	if err := e.Add(&Request{ID: "d", Prompt: prompt(1, 4), MaxTokens: 1}); err != nil {
		t.Fatal(err)
	}
	if err := e.Add(&Request{ID: "d", Prompt: prompt(1, 4), MaxTokens: 1}); err == nil {
		t.Error("duplicate id accepted")
	}
}

func TestAbortFreesBlocks(t *testing.T) {
	e := newEngine(t, nil)
	r := &Request{ID: "a", Prompt: prompt(1, 100), MaxTokens: 50}
	if err := e.Add(r); err != nil {
		t.Fatal(err)
	}
	e.Step(0)
	e.Step(1)
	if e.Pool().NumFree() == e.Pool().NumBlocks() {
		t.Fatal("running request holds no blocks")
	}
	if !e.Abort("a") {
		t.Fatal("Abort of a running request returned false")
	}
	if e.HasWork() || e.Pool().NumFree() != e.Pool().NumBlocks() {
		t.Fatalf("after abort: work=%v free=%d of %d", e.HasWork(), e.Pool().NumFree(), e.Pool().NumBlocks())
	}
}
