// Package lmcache emulates LMCache's L1 tier inside a vLLM worker: a CPU
// RAM store of fixed-size token chunks (256 by default) under a byte
// capacity with LRU eviction. A prompt prefix found here is loaded into GPU
// memory over PCIe instead of being prefilled; new prompt KV is stored after
// prefill. Only whole chunks are stored (LMCache's save_unfull_chunk=false).
//
// The store keeps no KV bytes — the simulator has none — only which chunks
// exist and how many bytes they would take, so capacity and eviction behave
// as in a real worker. The L2 tier (Tiered) does move real bytes.
package lmcache

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	lru "github.com/hashicorp/golang-lru/v2/simplelru"

	"github.com/warmpath/warmpath/libs/blockhash"
	"github.com/warmpath/warmpath/tools/vllmsim/engine"
	"github.com/warmpath/warmpath/tools/vllmsim/kvblock"
)

// MediumCPU is the Medium of L1 events, as LMCache reports its CPU tier.
const MediumCPU = "CPU"

// EventMode is what the L1 tells the KV-event stream, after the LMCache
// release being modelled (docs/simulator.md cites the sources).
type EventMode string

// Event modes.
const (
	// EventsStoreOnly publishes a BlockStored for every chunk stored and
	// nothing when one is evicted: current LMCache (its KV-event RFC,
	// LMCache issue #1846, struck eviction from scope; the multi-process
	// connector's events, PR #5076, are "store-only"). The default, so the
	// router is tested against what it will meet.
	EventsStoreOnly EventMode = "store-only"
	// EventsNone publishes no CPU events at all: LMCache releases before
	// event support (PR #1959), and combinations that forward only vLLM's
	// GPU events (LMCache issue #3532).
	EventsNone EventMode = "none"
	// EventsFull publishes stores and evictions: a future LMCache, opt-in.
	EventsFull EventMode = "full"
)

// ParseEventMode validates a mode's name; "" is the default, store-only.
func ParseEventMode(s string) (EventMode, error) {
	switch m := EventMode(s); m {
	case "":
		return EventsStoreOnly, nil
	case EventsStoreOnly, EventsNone, EventsFull:
		return m, nil
	}
	return "", fmt.Errorf("lmcache: unknown event mode %q (want none, store-only or full)", s)
}

// Config sizes the L1 store.
type Config struct {
	// ChunkSize is tokens per chunk (LMCache chunk_size, default 256).
	ChunkSize int
	// MaxBytes is the L1 capacity (LMCache max_local_cpu_size, in bytes).
	MaxBytes int64
	// BytesPerToken is the KV size of one token on this worker (per rank).
	BytesPerToken int64
	// Events is what the L1 publishes; "" is EventsStoreOnly.
	Events EventMode
}

// Counters are cumulative L1 totals, the sources of LMCache's metrics.
type Counters struct {
	LookupRequests int64
	LookupTokens   int64
	LookupHits     int64 // tokens found (the whole hit, GPU-resident part included)
	StoreRequests  int64
	StoredTokens   int64
	Evictions      int64 // chunks evicted (local_cpu_evict_count)
}

// L1 is the CPU chunk store. It is safe for concurrent use.
type L1 struct {
	cfg        Config
	hasher     *blockhash.Hasher
	chunkBytes int64

	mu       sync.Mutex
	lru      *lru.LRU[blockhash.Hash, []uint32] // chunk hash → its tokens (for events)
	counters Counters
	events   []kvblock.Event
	evicted  []blockhash.Hash // filled by the LRU callback during Add
}

var _ engine.Connector = (*L1)(nil)

// New returns an empty L1. A capacity below one chunk disables storing.
func New(cfg Config, h *blockhash.Hasher) (*L1, error) {
	if cfg.ChunkSize == 0 {
		cfg.ChunkSize = 256
	}
	if cfg.ChunkSize < 1 || cfg.BytesPerToken < 1 || cfg.MaxBytes < 0 {
		return nil, errors.New("lmcache: chunk size and bytes per token must be positive, capacity non-negative")
	}
	if h == nil {
		return nil, errors.New("lmcache: nil hasher")
	}
	mode, err := ParseEventMode(string(cfg.Events))
	if err != nil {
		return nil, err
	}
	cfg.Events = mode
	c := &L1{cfg: cfg, hasher: h, chunkBytes: int64(cfg.ChunkSize) * cfg.BytesPerToken}
	capacity := int(cfg.MaxBytes / c.chunkBytes)
	if capacity > 0 {
		l, err := lru.NewLRU[blockhash.Hash, []uint32](capacity, func(k blockhash.Hash, _ []uint32) {
			c.evicted = append(c.evicted, k)
		})
		if err != nil {
			return nil, fmt.Errorf("lmcache: %w", err)
		}
		c.lru = l
	}
	return c, nil
}

// CapacityChunks is how many chunks the L1 holds at most.
func (c *L1) CapacityChunks() int { return int(c.cfg.MaxBytes / c.chunkBytes) }

// ChunkTokens is tokens per chunk (LMCache's chunk_size).
func (c *L1) ChunkTokens() int { return c.cfg.ChunkSize }

// ChunkBytes is the size of one stored chunk.
func (c *L1) ChunkBytes() int64 { return c.chunkBytes }

// Lookup implements engine.Connector: the leading whole chunks of tokens
// held in L1.
func (c *L1) Lookup(tokens []uint32, extra []string) engine.Hit {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.counters.LookupRequests++
	c.counters.LookupTokens += int64(len(tokens))
	if c.lru == nil {
		return engine.Hit{}
	}
	hit := 0
	for _, h := range c.hasher.Chain(tokens, c.cfg.ChunkSize, extra) {
		if !c.lru.Contains(h) {
			break
		}
		hit += c.cfg.ChunkSize
	}
	c.counters.LookupHits += int64(hit)
	return engine.Hit{CPU: hit}
}

// Store implements engine.Connector: every whole chunk of tokens becomes
// (or stays) resident and most recently used; older chunks are evicted
// when capacity runs out.
func (c *L1) Store(tokens []uint32, extra []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.store(tokens, extra)
	c.counters.StoreRequests++
}

// store adds tokens' whole chunks; holds c.mu.
func (c *L1) store(tokens []uint32, extra []string) {
	if c.lru == nil {
		return
	}
	hashes := c.hasher.Chain(tokens, c.cfg.ChunkSize, extra)
	stored := kvblock.Event{Kind: kvblock.Stored, BlockSize: c.cfg.ChunkSize, Medium: MediumCPU}
	flush := func() {
		if len(stored.Hashes) > 0 && c.cfg.Events != EventsNone {
			c.events = append(c.events, stored)
		}
	}
	for i, h := range hashes {
		if _, ok := c.lru.Get(h); ok {
			// Already resident (touched); a new run of stored chunks starts after it.
			flush()
			parent := h
			stored = kvblock.Event{Kind: kvblock.Stored, BlockSize: c.cfg.ChunkSize, Medium: MediumCPU, Parent: &parent}
			continue
		}
		if len(stored.Hashes) == 0 && i > 0 && stored.Parent == nil {
			parent := hashes[i-1]
			stored.Parent = &parent
		}
		chunk := slices.Clone(tokens[i*c.cfg.ChunkSize : (i+1)*c.cfg.ChunkSize])
		c.lru.Add(h, chunk)
		stored.Hashes = append(stored.Hashes, h)
		stored.Tokens = append(stored.Tokens, chunk...)
		c.counters.StoredTokens += int64(c.cfg.ChunkSize)
		if len(c.evicted) > 0 {
			// The eviction may hit a chunk stored earlier in this call: its
			// Stored event must go out before the Removed one.
			flush()
			parent := h
			stored = kvblock.Event{Kind: kvblock.Stored, BlockSize: c.cfg.ChunkSize, Medium: MediumCPU, Parent: &parent}
			c.drainEvicted()
		}
	}
	flush()
}

// drainEvicted counts LRU evictions, and turns them into Removed events
// where the mode publishes them; holds c.mu.
func (c *L1) drainEvicted() {
	for _, h := range c.evicted {
		if c.cfg.Events == EventsFull {
			c.events = append(c.events, kvblock.Event{Kind: kvblock.Removed, Hashes: []blockhash.Hash{h}, BlockSize: c.cfg.ChunkSize, Medium: MediumCPU})
		}
		c.counters.Evictions++
	}
	c.evicted = c.evicted[:0]
}

// Resident is how many of hashes, in order from the first, the store
// holds: the leading run a lookup would find, without touching recency
// or counters. A connector that already hashed a prompt's chunks (one
// consulting several stores) asks each store with the same hashes.
func (c *L1) Resident(hashes []blockhash.Hash) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lru == nil {
		return 0
	}
	for i, h := range hashes {
		if !c.lru.Contains(h) {
			return i
		}
	}
	return len(hashes)
}

// TakeEvents returns the L1 events since the last call.
func (c *L1) TakeEvents() []kvblock.Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	ev := c.events
	c.events = nil
	return ev
}

// Counters returns cumulative totals.
func (c *L1) Counters() Counters {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counters
}

// UsageBytes is the bytes the resident chunks would occupy.
func (c *L1) UsageBytes() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lru == nil {
		return 0
	}
	return int64(c.lru.Len()) * c.chunkBytes
}

// Usage is the fraction of capacity in use (0..1).
func (c *L1) Usage() float64 {
	if c.cfg.MaxBytes == 0 {
		return 0
	}
	return float64(c.UsageBytes()) / float64(c.cfg.MaxBytes)
}

// Hashes returns the hashes of the resident chunks.
func (c *L1) Hashes() []blockhash.Hash {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lru == nil {
		return nil
	}
	return c.lru.Keys()
}

// Len returns the number of resident chunks.
func (c *L1) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lru == nil {
		return 0
	}
	return c.lru.Len()
}
