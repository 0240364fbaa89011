package strategy

import (
	"math"
	"sync"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"
	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// PrefixAwareConfig parameterises PrefixAware. Zero fields take the
// defaults listed with each field.
type PrefixAwareConfig struct {
	// ChunkSize is the chunk length in bytes of prompt text (default 128,
	// about 32 tokens, i.e. two vLLM blocks of 16). Only whole chunks are
	// hashed, since a worker only caches whole blocks.
	ChunkSize int `json:"chunkSize" yaml:"chunkSize"`
	// CharsPerToken converts a worker's capacity in tokens into bytes of
	// text (default 4).
	CharsPerToken float64 `json:"charsPerToken" yaml:"charsPerToken"`
	// FallbackCapacityTokens is assumed for a worker whose block size and
	// GPU block count have not been scraped yet (default 200000).
	FallbackCapacityTokens int `json:"fallbackCapacityTokens" yaml:"fallbackCapacityTokens"`
	// MaxChunksPerEndpoint caps one worker's LRU whatever capacity it
	// reports (default 262144 chunks, i.e. 32 MiB of text at the default
	// chunk size, about 100 bytes of router memory per chunk).
	MaxChunksPerEndpoint int `json:"maxChunksPerEndpoint" yaml:"maxChunksPerEndpoint"`
	// OffloadCapacityTokens is what each worker's KV offload tier (LMCache
	// L1 in CPU RAM) holds beyond its GPU cache, in tokens: LMCache's
	// max_local_cpu_size over the model's KV bytes per token (5 GB / 128 KiB
	// ≈ 38000 for Llama-3.1-8B). A prompt evicted from the GPU but still in
	// L1 is served from there, so the router should keep remembering it.
	// Default 0: GPU only, as vLLM's metrics report it.
	OffloadCapacityTokens int `json:"offloadCapacityTokens,omitempty" yaml:"offloadCapacityTokens,omitempty"`
	// MaxEndpoints bounds how many endpoints' chunk tables are kept
	// (default 1024): the router forgets an endpoint that leaves the pool,
	// but a Pick racing that removal recreates its table, so with worker
	// churn (pods replaced under new addresses) the tables of endpoints
	// long gone would accumulate. Beyond the bound, the table recorded into
	// least recently is dropped. Memory is thus at most MaxEndpoints ×
	// MaxChunksPerEndpoint chunks.
	MaxEndpoints int `json:"maxEndpoints,omitempty" yaml:"maxEndpoints,omitempty"`
}

func (c PrefixAwareConfig) withDefaults() PrefixAwareConfig {
	if c.ChunkSize == 0 {
		c.ChunkSize = 128
	}
	if c.CharsPerToken == 0 {
		c.CharsPerToken = 4
	}
	if c.FallbackCapacityTokens == 0 {
		c.FallbackCapacityTokens = 200_000
	}
	if c.MaxChunksPerEndpoint == 0 {
		c.MaxChunksPerEndpoint = 1 << 18
	}
	if c.MaxEndpoints == 0 {
		c.MaxEndpoints = 1024
	}
	return c
}

func (c PrefixAwareConfig) validate() error {
	switch {
	case c.ChunkSize <= 0:
		return errorf("prefixAware.chunkSize must be a positive number of bytes, got %d", c.ChunkSize)
	case !(c.CharsPerToken > 0) || math.IsInf(c.CharsPerToken, 1):
		return errorf("prefixAware.charsPerToken must be a finite number > 0, got %v", c.CharsPerToken)
	case c.FallbackCapacityTokens <= 0:
		return errorf("prefixAware.fallbackCapacityTokens must be positive, got %d", c.FallbackCapacityTokens)
	case c.MaxChunksPerEndpoint <= 0:
		return errorf("prefixAware.maxChunksPerEndpoint must be positive, got %d", c.MaxChunksPerEndpoint)
	case c.MaxEndpoints <= 0:
		return errorf("prefixAware.maxEndpoints must be positive, got %d", c.MaxEndpoints)
	case c.OffloadCapacityTokens < 0:
		return errorf("prefixAware.offloadCapacityTokens must not be negative, got %d", c.OffloadCapacityTokens)
	}
	return nil
}

// CapacityChunks returns how many chunk hashes PrefixAware keeps for ep:
// its cache capacity in tokens (NumGPUBlocks × BlockSize when both are
// known, else FallbackCapacityTokens, plus OffloadCapacityTokens) ×
// CharsPerToken / ChunkSize, rounded up, at least 1 and at most
// MaxChunksPerEndpoint. c must be defaulted.
func (c PrefixAwareConfig) CapacityChunks(ep Endpoint) int {
	return c.shareChunks(ep, 1)
}

// shareChunks is CapacityChunks for one of replicas routers that split
// the prompt families between them: a 1/replicas share of the tokens. The
// cap bounds the router's memory, so it applies after the share.
func (c PrefixAwareConfig) shareChunks(ep Endpoint, replicas int) int {
	tokens := float64(c.FallbackCapacityTokens)
	if ep.NumGPUBlocks > 0 && ep.BlockSize > 0 {
		tokens = float64(ep.NumGPUBlocks) * float64(ep.BlockSize)
	}
	tokens += float64(c.OffloadCapacityTokens)
	n := math.Ceil(tokens / float64(max(replicas, 1)) * c.CharsPerToken / float64(c.ChunkSize))
	return int(min(max(n, 1), float64(c.MaxChunksPerEndpoint)))
}

// PrefixAware is approximate cache-aware routing (the default strategy).
// It splits the prompt into ChunkSize-byte chunks and chains their hashes
// (each chunk's hash is xxhash of its bytes seeded with the previous
// chunk's hash; the first is seeded by the request kind, model, CacheSalt
// and LoRA), so a chunk hash stands for the whole prefix up to it, as vLLM's
// block hashes do. Per endpoint it keeps an LRU of the chunk hashes it has
// sent there, sized by CapacityChunks and resized when the worker's
// reported capacity changes; the endpoint with the longest contiguous match
// from the first chunk wins, through the LoadGuard, and the request's chunks
// are then recorded on the chosen endpoint (it learns from its own
// decisions; nothing is learnt from the workers).
//
// Chat requests are rendered as role + "\x00" + content + "\x00" per
// message, so a conversation's next turn shares all chunks of the turns
// before it. A chat request never shares chunks with a completion request,
// even for the same text: the worker applies a chat template the router does
// not know, so their KV caches differ, and the request kind is part of the
// seed.
//
// With several router replicas relaying each prompt to its owner (package
// peer), each replica routes only its own prompt families, while every
// worker's cache holds all replicas' placements: a replica that modelled
// the whole cache for its families alone would keep crediting prefixes
// the other replicas' traffic has evicted. SetReplicas makes it model its
// share instead.
//
// Memory is bounded: at most CapacityChunks entries per endpoint, whatever
// the number of prompts or models (models only seed the hashes; they share
// the endpoint's one LRU), and an endpoint's entries go when Forget is
// called. A Pick hashes the prompt once (O(chunks)), probes each eligible
// candidate's LRU O(log matched) times (see matchLocked) and records
// O(chunks) entries on the chosen one: linear in the prompt, independent of
// the LRU sizes. PrefixAware is safe for concurrent use.
type PrefixAware struct {
	cfg   PrefixAwareConfig
	guard LoadGuard

	mu       sync.RWMutex           // guards caches (the map, not the caches)
	caches   map[string]*chunkCache // by Endpoint.ID
	clock    atomic.Uint64          // orders records, for dropping the stalest table
	replicas atomic.Int64           // router replicas sharing the workers (SetReplicas); 0 is 1
}

var (
	_ Strategy  = (*PrefixAware)(nil)
	_ Forgetter = (*PrefixAware)(nil)
	_ Inspector = (*PrefixAware)(nil)
)

// NewPrefixAware returns a PrefixAware strategy; zero fields of cfg take
// their defaults. It does not validate; Config.Validate does.
func NewPrefixAware(cfg PrefixAwareConfig, guard LoadGuardConfig) *PrefixAware {
	return &PrefixAware{cfg: cfg.withDefaults(), guard: NewLoadGuard(guard), caches: map[string]*chunkCache{}}
}

// Name returns "prefixaware".
func (*PrefixAware) Name() string { return NamePrefixAware }

// SetReplicas tells p that it is one of n router replicas that split the
// prompt families between them by relaying each request to its owner
// (package peer), so it routes about 1/n of each worker's traffic while
// the worker's cache holds all of it: p then models 1/n of each worker's
// capacity, which is how much of the cache its own families keep under
// the others' traffic. n < 1 is one replica (not peered). Replicas that
// each route whatever reaches them, without relaying, must not call it:
// each sees a random 1/n of all requests, so a prefix's reuses are thinned
// as much as the traffic that would evict it, the whole capacity already
// matches how long the worker keeps it, and a share would forget prefixes
// the worker still holds. Tables take the new share at their next record.
// Safe for concurrent use.
func (p *PrefixAware) SetReplicas(n int) { p.replicas.Store(int64(max(n, 1))) }

// Pick chooses the endpoint with the longest believed-cached prefix of the
// request among those the LoadGuard allows, records the request's chunks
// on it, and reports the match: MatchedChunks is the chosen endpoint's
// match before recording, TotalChunks the request's whole chunks.
// ErrNoEndpoint when eps is empty.
func (p *PrefixAware) Pick(req *Request, eps []Endpoint) (Decision, error) {
	if len(eps) == 0 {
		return Decision{}, ErrNoEndpoint
	}
	var hbuf [128]uint64
	hs, seed := p.chunkHashes(req, hbuf[:0])
	var cbuf [32]*chunkCache
	cs := cbuf[:0]
	p.mu.RLock()
	for i := range eps {
		cs = append(cs, p.caches[eps[i].ID])
	}
	p.mu.RUnlock()
	best := p.guard.Choose(eps, seed, func(i int) float64 {
		return float64(cs[i].match(hs))
	})
	d := p.record(NamePrefixAware, cs[best], &eps[best], hs)
	if d.MatchedChunks == 0 && d.TotalChunks > 0 && !anyMatch(cs, hs) {
		d.Fallback = FallbackNoPrefixCached
	}
	return d, nil
}

// anyMatch reports whether any of cs holds the first of hs. Called only
// when the chosen worker matched nothing, it tells a prompt no worker
// holds from one the load guard sent away from its holder (the guard
// scores only the workers it admits).
func anyMatch(cs []*chunkCache, hs []uint64) bool {
	for _, c := range cs {
		if c.match(hs[:1]) > 0 {
			return true
		}
	}
	return false
}

// Forget drops everything learnt about endpointID.
func (p *PrefixAware) Forget(endpointID string) {
	p.mu.Lock()
	delete(p.caches, endpointID)
	p.mu.Unlock()
}

// CacheKnowledge reports, per endpoint ID, how many chunk hashes are held
// and the LRU's current capacity.
func (p *PrefixAware) CacheKnowledge() map[string]Knowledge {
	p.mu.RLock()
	defer p.mu.RUnlock()
	out := make(map[string]Knowledge, len(p.caches))
	for id, c := range p.caches {
		c.mu.RLock()
		out[id] = Knowledge{Chunks: c.lru.Len(), CapacityChunks: c.size}
		c.mu.RUnlock()
	}
	return out
}

// observe records req on ep, as if Pick had chosen it, and returns the
// decision; Session uses it so that keyless requests see what session
// traffic put in the workers' caches.
func (p *PrefixAware) observe(strategy string, req *Request, ep *Endpoint) Decision {
	var hbuf [128]uint64
	hs, _ := p.chunkHashes(req, hbuf[:0])
	p.mu.RLock()
	c := p.caches[ep.ID]
	p.mu.RUnlock()
	return p.record(strategy, c, ep, hs)
}

// record adds hs to ep's cache (created on first use, resized when its
// capacity changed) and returns the decision with the match found before.
func (p *PrefixAware) record(strategy string, c *chunkCache, ep *Endpoint, hs []uint64) Decision {
	want := p.cfg.shareChunks(*ep, int(p.replicas.Load()))
	if c == nil {
		p.mu.Lock()
		if c = p.caches[ep.ID]; c == nil {
			if len(p.caches) >= p.cfg.MaxEndpoints {
				p.dropStalestLocked()
			}
			c = newChunkCache(want)
			p.caches[ep.ID] = c
		}
		p.mu.Unlock()
	}
	c.used.Store(p.clock.Add(1))
	matched := c.record(hs, want)
	d := Decision{Endpoint: ep.ID, Strategy: strategy, MatchedChunks: matched, TotalChunks: len(hs)}
	if len(hs) > 0 {
		d.MatchRatio = float64(matched) / float64(len(hs))
	}
	return d
}

// dropStalestLocked drops the chunk table recorded into least recently;
// p.mu held for writing. Linear in the endpoints, it runs only when a new
// endpoint's table would exceed MaxEndpoints.
func (p *PrefixAware) dropStalestLocked() {
	var stalest string
	oldest := uint64(math.MaxUint64)
	for id, c := range p.caches {
		if u := c.used.Load(); u < oldest {
			stalest, oldest = id, u
		}
	}
	delete(p.caches, stalest)
}

// Request kinds seed the chain, so chat and completion never share chunks.
const (
	kindCompletion = "p"
	kindChat       = "m"
)

// chunkHashes appends the chained hashes of req's whole chunks to dst. seed
// identifies the prompt for the LoadGuard's tie-break: the last whole
// chunk's hash, or for a prompt shorter than one chunk the hash of its
// text.
func (p *PrefixAware) chunkHashes(req *Request, dst []uint64) (hs []uint64, seed uint64) {
	kind := kindCompletion
	if len(req.Messages) > 0 {
		kind = kindChat
	}
	var d xxhash.Digest
	d.Reset()
	for _, s := range [...]string{kind, req.Model, req.CacheSalt, req.LoRA} {
		_, _ = d.WriteString(s)
		_, _ = d.WriteString("\x00")
	}
	d.ResetWithSeed(d.Sum64())
	// write feeds text into fixed-size chunks, each hashed with the
	// previous chunk's hash as its seed. (A closure rather than a method on
	// a chunker struct keeps dst on the caller's stack.)
	size, fill := p.cfg.ChunkSize, 0
	write := func(s string) {
		for len(s) > 0 {
			n := min(size-fill, len(s))
			_, _ = d.WriteString(s[:n])
			fill += n
			s = s[n:]
			if fill == size {
				h := d.Sum64()
				dst = append(dst, h)
				d.ResetWithSeed(h)
				fill = 0
			}
		}
	}
	if kind == kindChat {
		for _, m := range req.Messages {
			write(m.Role)
			write("\x00")
			write(m.Content)
			write("\x00")
		}
	} else {
		write(req.Prompt)
	}
	return dst, d.Sum64()
}

// chunkCache is one endpoint's LRU of chunk hashes. The LRU itself is not
// safe for concurrent use; mu guards it and size.
type chunkCache struct {
	used atomic.Uint64 // PrefixAware.clock at the last record
	mu   sync.RWMutex
	lru  *simplelru.LRU[uint64, struct{}]
	size int
}

func newChunkCache(size int) *chunkCache {
	l, err := simplelru.NewLRU[uint64, struct{}](size, nil)
	if err != nil {
		panic(err) // size >= 1 by construction (CapacityChunks)
	}
	return &chunkCache{lru: l, size: size}
}

// match returns how many leading hashes of hs are cached (0 for a nil
// cache). It does not refresh recency: the endpoint may not be chosen.
func (c *chunkCache) match(hs []uint64) int {
	if c == nil {
		return 0
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.matchLocked(hs)
}

func (c *chunkCache) matchLocked(hs []uint64) int {
	// Gallop, then binary search: O(log matched) lookups. Exact because
	// the cached set is prefix-closed: record adds a chain's chunks last to
	// first, so a chunk is never less recent than any chunk after it in a
	// chain, and the LRU evicts chains from the tail. Present at i thus
	// implies present at every j < i.
	lo, hi := 0, len(hs) // hs[:lo] are cached; hs[hi] is not (or hi == len)
	for step := 1; lo < hi; step *= 2 {
		i := min(lo+step-1, hi-1)
		if !c.lru.Contains(hs[i]) {
			hi = i
			break
		}
		lo = i + 1
	}
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if c.lru.Contains(hs[mid]) {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// record resizes the cache to size if needed, then adds hs from last to
// first, so a prefix's first chunks are the most recent and are evicted
// last, as a worker evicts a sequence's tail blocks before its head. It
// returns the match before adding.
func (c *chunkCache) record(hs []uint64, size int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if size != c.size {
		c.lru.Resize(size)
		c.size = size
	}
	matched := c.matchLocked(hs)
	for i := len(hs) - 1; i >= 0; i-- {
		c.lru.Add(hs[i], struct{}{})
	}
	return matched
}
