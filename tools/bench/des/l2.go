package des

import (
	"github.com/warmpath/warmpath/libs/blockhash"
	"github.com/warmpath/warmpath/libs/timing"
	"github.com/warmpath/warmpath/tools/vllmsim/engine"
	"github.com/warmpath/warmpath/tools/vllmsim/lmcache"
)

// tiered is one worker's LMCache with both tiers, as the simulator's
// lmcache.Tiered behaves, but over a chunk store instead of a cache
// server: lookups take the worker's own L1, then the chunks the shared L2
// holds right after it; a prefilled prompt is written through to both; an
// L2 hit is fetched on admission and promoted into L1. The network moves
// no bytes here, so a fetch is charged what libs/timing prices the
// remote tier at (NetworkSeconds, then the PCIe copy as an L1 load:
// together LoadSeconds(TierRemote)), the cost kvaware credits L2 with.
type tiered struct {
	l1, l2 *lmcache.L1
	hasher *blockhash.Hasher
	model  timing.Model
}

var (
	_ engine.Connector = (*tiered)(nil)
	_ engine.Fetcher   = (*tiered)(nil)
)

// Lookup implements engine.Connector.
func (t *tiered) Lookup(tokens []uint32, extra []string) engine.Hit {
	hashes := t.hasher.Chain(tokens, t.l1.ChunkTokens(), extra)
	cpu := t.l1.Resident(hashes)
	remote := t.l2.Resident(hashes[cpu:])
	return engine.Hit{CPU: cpu * t.l1.ChunkTokens(), Remote: remote * t.l1.ChunkTokens()}
}

// Store implements engine.Connector. The cache server takes the write at
// once: LMCache writes behind, but the write is on the wire while the
// prefill's step ends, well before another request could look it up.
func (t *tiered) Store(tokens []uint32, extra []string) {
	t.l1.Store(tokens, extra)
	t.l2.Store(tokens, extra)
}

// FetchRemote implements engine.Fetcher: the chunks covering
// tokens[start:end] that L2 still holds, stopping at the first it has
// evicted since the lookup, promoted into L1 as LMCache promotes them.
func (t *tiered) FetchRemote(tokens []uint32, extra []string, start, end int) (int, float64) {
	cs := t.l1.ChunkTokens()
	hashes := t.hasher.Chain(tokens, cs, extra)
	first, last := start/cs, min((end+cs-1)/cs, len(hashes))
	got := t.l2.Resident(hashes[first:last])
	if got == 0 {
		return start, 0
	}
	t.l1.Store(tokens[:(first+got)*cs], extra)
	fetched := min((first+got)*cs, end)
	return fetched, t.model.NetworkSeconds(fetched - start)
}

// l2View is the shared L2's own account of what it holds, as the router's
// l2view keeps it from the cache servers' events (here without their
// delay): kvaware credits every worker with it.
type l2View struct{ store *lmcache.L1 }

// ChunkTokens implements strategy.L2View: the fleet's chunk size.
func (l2View) ChunkTokens() int { return l1ChunkTokens }

// Leading implements strategy.L2View. LMCache's L2 keys name the model,
// not the adapter, so a LoRA request is credited nothing (as l2view does).
func (v l2View) Leading(_, lora string, tokens []uint32) int {
	if lora != "" {
		return 0
	}
	return v.store.Lookup(tokens, nil).CPU
}
