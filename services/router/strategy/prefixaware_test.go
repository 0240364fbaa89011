package strategy

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/warmpath/warmpath/services/router/kvindex"
)

// longText returns n bytes of text that differ for different seeds.
func longText(seed uint64, n int) string {
	rng := rand.New(rand.NewPCG(seed, 99))
	const words = "the quick brown fox jumps over a lazy dog while system prompts say be helpful "
	var b strings.Builder
	for b.Len() < n {
		i := rng.IntN(len(words) - 8)
		b.WriteString(words[i : i+1+rng.IntN(7)])
		fmt.Fprintf(&b, "%d ", rng.IntN(1000))
	}
	return b.String()[:n]
}

// sharedChunks returns how many leading chunk hashes a and b share, and
// their chunk counts.
func sharedChunks(p *PrefixAware, a, b *Request) (shared, na, nb int) {
	ha, _ := p.chunkHashes(a, nil)
	hb, _ := p.chunkHashes(b, nil)
	for shared < min(len(ha), len(hb)) && ha[shared] == hb[shared] {
		shared++
	}
	return shared, len(ha), len(hb)
}

// TestChunkHashes documents which requests share chunks: the same model,
// salt, LoRA and kind (chat or completion) and the same leading text, in
// whole chunks. Chat and completion never share, even for the same text:
// the worker renders chat through a template the router does not know.
func TestChunkHashes(t *testing.T) {
	sys := longText(1, 300) // 2 whole chunks of 128, and 44 bytes
	chat := func(model string, msgs ...string) *Request {
		r := &Request{Model: model}
		for i, m := range msgs {
			r.Messages = append(r.Messages, Message{Role: []string{"system", "user", "assistant"}[min(i, 2)], Content: m})
		}
		return r
	}
	tests := []struct {
		name       string
		a, b       *Request
		wantShared int
		wantA      int
	}{
		{"same prompt", &Request{Model: "m", Prompt: sys}, &Request{Model: "m", Prompt: sys}, 2, 2},
		{"shared prefix", &Request{Model: "m", Prompt: sys + longText(2, 200)}, &Request{Model: "m", Prompt: sys + longText(3, 200)}, 2, 3},
		{"shorter than a chunk", &Request{Model: "m", Prompt: "hi"}, &Request{Model: "m", Prompt: "hi"}, 0, 0},
		{"different first byte", &Request{Model: "m", Prompt: "x" + sys}, &Request{Model: "m", Prompt: "y" + sys}, 0, 2},
		{"other model", &Request{Model: "m", Prompt: sys}, &Request{Model: "n", Prompt: sys}, 0, 2},
		{"other cache salt", &Request{Model: "m", Prompt: sys}, &Request{Model: "m", Prompt: sys, CacheSalt: "s"}, 0, 2},
		{"other LoRA", &Request{Model: "m", Prompt: sys}, &Request{Model: "m", Prompt: sys, LoRA: "l"}, 0, 2},
		{"chat never matches completion", chat("m", sys), &Request{Model: "m", Prompt: "system\x00" + sys + "\x00"}, 0, 2},
		{"same chat", chat("m", sys, "q"), chat("m", sys, "q"), 2, 2},
		{"next chat turn extends the last", chat("m", sys, longText(4, 200)), chat("m", sys, longText(4, 200), "answer", "next"), 4, 4},
		{"role is part of the text", chat("m", "a", sys), &Request{Model: "m", Messages: []Message{{"user", "a"}, {"user", sys}}}, 0, 2},
	}
	p := NewPrefixAware(PrefixAwareConfig{ChunkSize: 128}, LoadGuardConfig{})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			shared, na, _ := sharedChunks(p, tt.a, tt.b)
			if shared != tt.wantShared || na != tt.wantA {
				t.Errorf("shared %d of %d chunks, want %d of %d", shared, na, tt.wantShared, tt.wantA)
			}
		})
	}
}

func TestPrefixAwareLearns(t *testing.T) {
	p := NewPrefixAware(PrefixAwareConfig{}, LoadGuardConfig{Window: 2})
	e := eps(0, 0, 0, 0)
	sys := longText(7, 1024)
	d1, _ := p.Pick(&Request{Model: "m", Prompt: sys + "first question"}, e)
	if d1.MatchedChunks != 0 || d1.TotalChunks != 8 || d1.Strategy != NamePrefixAware {
		t.Errorf("first Pick = %+v, want 0 of 8 chunks matched by prefixaware", d1)
	}
	e = withLoad(e, d1.Endpoint, 2) // still within the window
	d2, _ := p.Pick(&Request{Model: "m", Prompt: sys + "second question, longer"}, e)
	if d2.Endpoint != d1.Endpoint || d2.MatchedChunks != 8 || d2.MatchRatio != 1 {
		t.Errorf("second Pick = %+v, want %s with 8 of 8 chunks matched", d2, d1.Endpoint)
	}
	e = withLoad(e, d1.Endpoint, 3) // now over the window
	d3, _ := p.Pick(&Request{Model: "m", Prompt: sys + "third"}, e)
	if d3.Endpoint == d1.Endpoint || d3.MatchedChunks != 0 {
		t.Errorf("third Pick = %+v, want another endpoint (load guard) with no match", d3)
	}
	d4, _ := p.Pick(&Request{Model: "other", Prompt: sys}, eps(0, 0, 0, 0))
	if d4.MatchedChunks != 0 {
		t.Errorf("other model: matched %d chunks, want 0", d4.MatchedChunks)
	}
}

func TestPrefixAwareForget(t *testing.T) {
	p := NewPrefixAware(PrefixAwareConfig{}, LoadGuardConfig{Window: 2})
	req := &Request{Model: "m", Prompt: longText(3, 2048)}
	d, _ := p.Pick(req, eps(0, 0))
	if got := p.CacheKnowledge()[d.Endpoint].Chunks; got != 16 {
		t.Fatalf("after a 2 KiB prompt %s holds %d chunks, want 16", d.Endpoint, got)
	}
	p.Forget(d.Endpoint)
	if k, ok := p.CacheKnowledge()[d.Endpoint]; ok {
		t.Errorf("after Forget %s still has %+v", d.Endpoint, k)
	}
	if d2, _ := p.Pick(req, eps(0, 0)); d2.MatchedChunks != 0 {
		t.Errorf("after Forget matched %d chunks, want 0 (a returning endpoint starts cold)", d2.MatchedChunks)
	}
	p.Forget("never-seen") // no-op
}

func TestCapacityChunks(t *testing.T) {
	cfg := PrefixAwareConfig{ChunkSize: 128, CharsPerToken: 4, FallbackCapacityTokens: 1000, MaxChunksPerEndpoint: 5000}
	tests := []struct {
		name string
		ep   Endpoint
		want int
	}{
		{"unknown capacity uses the fallback", Endpoint{}, 32}, // 1000 × 4 / 128 = 31.25
		{"half known uses the fallback", Endpoint{BlockSize: 16}, 32},
		{"blocks × block size", Endpoint{NumGPUBlocks: 100, BlockSize: 16}, 50},
		{"capped", Endpoint{NumGPUBlocks: 1 << 20, BlockSize: 16}, 5000},
		{"at least one", Endpoint{NumGPUBlocks: 1, BlockSize: 1}, 1},
		{"offload adds to the GPU", Endpoint{NumGPUBlocks: 100, BlockSize: 16}, 50 + 125}, // (1600 + 4000) × 4 / 128
		{"offload adds to the fallback", Endpoint{}, 157},                                 // (1000 + 4000) × 4 / 128 = 156.25
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := cfg
			if strings.HasPrefix(tt.name, "offload") {
				cfg.OffloadCapacityTokens = 4000
			}
			if got := cfg.CapacityChunks(tt.ep); got != tt.want {
				t.Errorf("CapacityChunks = %d, want %d", got, tt.want)
			}
		})
	}
}

// TestPrefixAwareBounded: an endless stream of unique prompts, over many
// models, never holds more than the sum of the endpoints' capacities, and
// a worker whose capacity becomes known is resized to it.
func TestPrefixAwareBounded(t *testing.T) {
	p := NewPrefixAware(PrefixAwareConfig{ChunkSize: 64, FallbackCapacityTokens: 1600}, LoadGuardConfig{Window: 2})
	e := eps(0, 0, 0)
	capacity := 3 * p.cfg.CapacityChunks(Endpoint{}) // 1600 × 4 / 64 = 100 each
	for i := range 5000 {
		req := &Request{Model: fmt.Sprintf("model-%d", i%97), Prompt: longText(uint64(i), 1000)}
		if _, err := p.Pick(req, e); err != nil {
			t.Fatal(err)
		}
	}
	total := 0
	for id, k := range p.CacheKnowledge() {
		if k.Chunks > k.CapacityChunks {
			t.Errorf("%s holds %d chunks over its capacity %d", id, k.Chunks, k.CapacityChunks)
		}
		total += k.Chunks
	}
	if total > capacity {
		t.Errorf("total chunks held = %d, want <= %d", total, capacity)
	}

	e[0].NumGPUBlocks, e[0].BlockSize = 40, 16 // 640 tokens → 40 chunks
	_, _ = p.Pick(&Request{Model: "m", Prompt: longText(1, 1000)}, e[:1])
	if got := p.CacheKnowledge()["a"]; got.CapacityChunks != 40 || got.Chunks > 40 {
		t.Errorf("after capacity became known: %+v, want capacity 40 and at most 40 chunks", got)
	}
}

// TestPrefixAwareSharedPrefixWorkload: 8 groups × 20 prompts sharing a long
// per-group system prompt over 4 endpoints, with simulated in-flight load.
// Groups stick to an endpoint, load stays balanced, and the match ratio
// clearly beats round robin's on the same trace.
func TestPrefixAwareSharedPrefixWorkload(t *testing.T) {
	const groups, perGroup, nEps = 8, 20, 4
	rng := rand.New(rand.NewPCG(5, 5))
	type item struct {
		group int
		req   *Request
	}
	var trace []item
	for g := range groups {
		sys := longText(uint64(1000+g), 4096)
		for q := range perGroup {
			trace = append(trace, item{g, &Request{Model: "m", Prompt: sys + longText(uint64(g*100+q), 300)}})
		}
	}
	rng.Shuffle(len(trace), func(i, j int) { trace[i], trace[j] = trace[j], trace[i] })

	// Each worker's cache holds about three groups' prompts (96 chunks), so
	// spreading every group over every worker thrashes it. The match ratio
	// is measured by an observer fed every decision, whatever the strategy.
	cfg := PrefixAwareConfig{FallbackCapacityTokens: 96 * 128 / 4}
	run := func(s Strategy) (byGroup [groups]map[string]int, assigned map[string]int, ratio float64) {
		e := eps(make([]int, nEps)...)
		obs := NewPrefixAware(cfg, LoadGuardConfig{})
		assigned = map[string]int{}
		done := map[int][]int{} // step → endpoint indexes finishing then
		var matched, total int
		for step, it := range trace {
			for _, i := range done[step] {
				e[i].InFlight--
			}
			d, err := s.Pick(it.req, e)
			if err != nil {
				t.Fatal(err)
			}
			i := int(d.Endpoint[0] - 'a')
			od := obs.observe("", it.req, &e[i])
			e[i].InFlight++
			end := step + 4 + rng.IntN(8) // service time: 4–11 arrivals
			done[end] = append(done[end], i)
			if byGroup[it.group] == nil {
				byGroup[it.group] = map[string]int{}
			}
			byGroup[it.group][d.Endpoint]++
			assigned[d.Endpoint]++
			matched += od.MatchedChunks
			total += od.TotalChunks
		}
		return byGroup, assigned, float64(matched) / float64(total)
	}

	// The simulated load here is coarse (whole requests per step), so the
	// trace was tuned with a window of 2 requests.
	byGroup, assigned, ratio := run(NewPrefixAware(cfg, LoadGuardConfig{Window: 2, Ratio: 0.1}))
	onModal := 0
	for g, m := range byGroup {
		most := 0
		for _, c := range m {
			most = max(most, c)
		}
		onModal += most
		t.Logf("group %d: %v", g, m)
	}
	if got, want := float64(onModal)/float64(len(trace)), 0.6; got < want {
		t.Errorf("share of requests on their group's main endpoint = %.2f, want >= %.2f", got, want)
	}
	most := 0
	for _, c := range assigned {
		most = max(most, c)
	}
	if got := float64(most) / (float64(len(trace)) / nEps); got > 1.3 {
		t.Errorf("max/mean assignments per endpoint = %.2f (%v), want <= 1.3", got, assigned)
	}
	_, _, rrRatio := run(NewRoundRobin())
	t.Logf("on main endpoint %.2f, max/mean assignments %.2f, match ratio: prefixaware %.2f, roundrobin %.2f",
		float64(onModal)/float64(len(trace)), float64(most)/(float64(len(trace))/nEps), ratio, rrRatio)
	if ratio < 0.7 || ratio < rrRatio+0.2 {
		t.Errorf("match ratio: prefixaware %.2f, roundrobin %.2f; want prefixaware >= 0.7 and >= roundrobin + 0.2", ratio, rrRatio)
	}
}

// TestMatchPrefixClosed checks the invariant the galloping match relies
// on: under shared prefixes, evictions and resizes, each endpoint's
// cached set stays prefix-closed, so the fast match equals a linear scan.
func TestMatchPrefixClosed(t *testing.T) {
	p := NewPrefixAware(PrefixAwareConfig{ChunkSize: 16, FallbackCapacityTokens: 200}, LoadGuardConfig{Window: 1}) // 50 chunks
	rng := rand.New(rand.NewPCG(3, 4))
	roots := make([]string, 6)
	for i := range roots {
		roots[i] = longText(uint64(i), 16*(1+rng.IntN(8)))
	}
	e := eps(0, 0, 0)
	var probes []*Request
	for step := range 3000 {
		// A tree of prefixes: a root, then up to 3 of 4 possible branches.
		text := roots[rng.IntN(len(roots))]
		for range rng.IntN(4) {
			text += longText(uint64(rng.IntN(4)), 16*(1+rng.IntN(3)))
		}
		req := &Request{Model: "m", Prompt: text}
		probes = append(probes, req)
		if step%500 == 0 { // resize one endpoint
			e[1].NumGPUBlocks, e[1].BlockSize = 10+rng.IntN(100), 1
		}
		d, err := p.Pick(req, e)
		if err != nil {
			t.Fatal(err)
		}
		e[int(d.Endpoint[0]-'a')].InFlight = rng.IntN(3)
	}
	partial := 0
	for _, req := range probes[len(probes)-300:] {
		hs, _ := p.chunkHashes(req, nil)
		for id, c := range p.caches {
			linear := 0
			for linear < len(hs) && c.lru.Contains(hs[linear]) {
				linear++
			}
			for i := linear + 1; i < len(hs); i++ {
				if c.lru.Contains(hs[i]) {
					t.Fatalf("%s: chunk %d cached but chunk %d is not: not prefix-closed", id, i, linear)
				}
			}
			if got := c.match(hs); got != linear {
				t.Fatalf("%s: match = %d, want %d (linear scan)", id, got, linear)
			}
			if 0 < linear && linear < len(hs) {
				partial++
			}
		}
	}
	if partial < 50 {
		t.Errorf("only %d partial matches among the probes; the test does not exercise the search", partial)
	}
}

// TestPrefixAwareMaxEndpoints: tables of endpoints that churned away are
// not kept beyond MaxEndpoints, even when never forgotten (a Pick racing
// the removal recreates one), and the least recently used table goes.
func TestPrefixAwareMaxEndpoints(t *testing.T) {
	p := NewPrefixAware(PrefixAwareConfig{MaxEndpoints: 8}, LoadGuardConfig{})
	req := &Request{Model: "m", Prompt: strings.Repeat("x", 1024)}
	keep := []Endpoint{{ID: "keep"}}
	for i := range 100 {
		if _, err := p.Pick(req, []Endpoint{{ID: fmt.Sprintf("gone-%d", i)}}); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Pick(req, keep); err != nil { // in use all along
			t.Fatal(err)
		}
		if n := len(p.CacheKnowledge()); n > 8 {
			t.Fatalf("after %d departed endpoints, %d chunk tables kept, over 8", i+1, n)
		}
	}
	if _, ok := p.CacheKnowledge()["keep"]; !ok {
		t.Fatal("the endpoint in use lost its table")
	}
	if _, ok := p.CacheKnowledge()["gone-0"]; ok {
		t.Fatal("the stalest table was kept")
	}
}

// TestPrefixAwareReplicaShare: one of n relaying replicas models its share
// of each worker's cache, a ceil(1/n) of the tokens, capped after the
// division; n < 1 is one replica, and a new share resizes a table at its
// next record.
func TestPrefixAwareReplicaShare(t *testing.T) {
	// 3000 tokens × 4 bytes / 128 = 93.75 chunks.
	cfg := PrefixAwareConfig{FallbackCapacityTokens: 3000}
	tests := []struct {
		name     string
		replicas int
		max      int
		want     int
	}{
		{"alone", 1, 0, 94},
		{"not peered", 0, 0, 94},
		{"a third", 3, 0, 32}, // 1000 × 4 / 128 = 31.25
		{"a fifth", 5, 0, 19}, // 600 × 4 / 128 = 18.75
		{"capped after the share", 3, 20, 20},
		{"at least one chunk", 1000, 0, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := cfg
			cfg.MaxChunksPerEndpoint = tt.max
			p := NewPrefixAware(cfg, LoadGuardConfig{})
			p.SetReplicas(tt.replicas)
			if _, err := p.Pick(&Request{Model: "m", Prompt: longText(1, 1024)}, eps(0)); err != nil {
				t.Fatal(err)
			}
			if got := p.CacheKnowledge()["a"].CapacityChunks; got != tt.want {
				t.Errorf("modelled capacity = %d chunks, want %d", got, tt.want)
			}
		})
	}

	p := NewPrefixAware(cfg, LoadGuardConfig{})
	_, _ = p.Pick(&Request{Model: "m", Prompt: longText(1, 1024)}, eps(0))
	p.SetReplicas(3)
	_, _ = p.Pick(&Request{Model: "m", Prompt: longText(2, 1024)}, eps(0))
	if got := p.CacheKnowledge()["a"].CapacityChunks; got != 32 {
		t.Errorf("after the peer set grew to 3: capacity %d chunks, want 32", got)
	}
}

// TestPrefixAwareReplicaCredits: three relaying replicas each route a third
// of the prompt families to the same worker, whose one cache all of them
// fill. The worker is modelled by a PrefixAware that sees every request,
// as a lone router would. A replica that models the whole cache for its
// own third keeps crediting a prompt that the other replicas' traffic has
// since evicted; one that models its share forgets it when the worker does,
// and still credits a prompt the worker holds.
func TestPrefixAwareReplicaCredits(t *testing.T) {
	const replicas = 3
	// 96 chunks of 128 bytes, twelve 1 KiB prompts.
	cfg := PrefixAwareConfig{FallbackCapacityTokens: 96 * 128 / 4}
	tests := []struct {
		name        string
		share       int // the replicas the one under test takes itself to be among
		rounds      int // after the prompt, rounds of one new prompt per replica
		wantWorker  int // chunks of the prompt the worker still holds
		wantCredits int // chunks the replica under test believes it holds
	}{
		{"whole capacity, still held", 1, 1, 8, 8},
		{"share, still held", replicas, 1, 8, 8},
		{"whole capacity, evicted by the others", 1, 4, 0, 8}, // the bug: credits what is gone
		{"share, evicted by the others", replicas, 4, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			worker := NewPrefixAware(cfg, LoadGuardConfig{})
			mine := NewPrefixAware(cfg, LoadGuardConfig{})
			mine.SetReplicas(tt.share)
			prompt := &Request{Model: "m", Prompt: longText(1000, 1024)}
			pick := func(p *PrefixAware, req *Request) Decision {
				t.Helper()
				d, err := p.Pick(req, eps(0))
				if err != nil {
					t.Fatal(err)
				}
				return d
			}
			pick(mine, prompt)
			pick(worker, prompt)
			for i := range tt.rounds * replicas {
				req := &Request{Model: "m", Prompt: longText(uint64(i), 1024)}
				if i%replicas == 0 { // the families this replica owns
					pick(mine, req)
				}
				pick(worker, req)
			}
			if got := pick(worker, prompt).MatchedChunks; got != tt.wantWorker {
				t.Fatalf("worker holds %d chunks of the prompt, want %d", got, tt.wantWorker)
			}
			if got := pick(mine, prompt).MatchedChunks; got != tt.wantCredits {
				t.Errorf("replica credits %d chunks of the prompt, want %d", got, tt.wantCredits)
			}
		})
	}
}

// TestReplicaShareReachesFallbacks: session and kvaware pass the replica
// count to the PrefixAware that routes their keyless or untokenized
// requests; the rest of their placement needs no share.
func TestReplicaShareReachesFallbacks(t *testing.T) {
	cfg := Config{PrefixAware: PrefixAwareConfig{FallbackCapacityTokens: 3000}}
	for _, name := range []string{NamePrefixAware, NameSession, NameKVAware} {
		t.Run(name, func(t *testing.T) {
			cfg := cfg
			cfg.Name = name
			s, err := New(cfg, WithIndex(kvindex.New(1<<10)))
			if err != nil {
				t.Fatal(err)
			}
			s.(interface{ SetReplicas(int) }).SetReplicas(3)
			if _, err := s.Pick(&Request{Model: "m", Prompt: longText(1, 1024)}, eps(0)); err != nil {
				t.Fatal(err)
			}
			var p *PrefixAware
			switch s := s.(type) {
			case *PrefixAware:
				p = s
			case *Session:
				p = s.fallback
			case *KVAware:
				p = s.fallback
			}
			if got := p.CacheKnowledge()["a"].CapacityChunks; got != 32 {
				t.Errorf("fallback models %d chunks, want 32 (a third of 94)", got)
			}
		})
	}
}
