// Package l2learn is kvaware's view of a shared L2 that says nothing of
// what it holds (Redis, or a cache server without --kv-events-endpoint):
// LMCache writes every chunk it stores through to its remote backend, so
// every whole chunk of a prompt a worker prefilled is taken as in the L2,
// most recently used first, within the L2's capacity. A chunk the L2
// evicted sooner is credited until the view's own LRU drops it: a worse
// route, never a wrong answer.
package l2learn

import (
	"errors"
	"fmt"
	"sync"

	"github.com/hashicorp/golang-lru/v2/simplelru"

	"github.com/warmpath/warmpath/services/router/kvindex"
)

// Config sizes the view.
type Config struct {
	// CapacityTokens is the L2's size in tokens (its memory over the
	// model's KV bytes per token); the view never holds more.
	CapacityTokens int
	// ChunkTokens is LMCache's chunk_size (256 when 0).
	ChunkTokens int
}

// Learner is the view. It is safe for concurrent use.
type Learner struct {
	chunk int

	mu sync.Mutex
	// block is the workers' block size the keys were learned at (each
	// prefill says), which Leading hashes prompts at; 0 before any.
	block int
	lru   *simplelru.LRU[uint64, struct{}] // a chunk's last block key
}

// New returns an empty view.
func New(cfg Config) (*Learner, error) {
	if cfg.ChunkTokens == 0 {
		cfg.ChunkTokens = 256
	}
	if cfg.ChunkTokens < 1 {
		return nil, fmt.Errorf("l2learn: chunk of %d tokens", cfg.ChunkTokens)
	}
	chunks := cfg.CapacityTokens / cfg.ChunkTokens
	if chunks < 1 {
		return nil, errors.New("l2learn: the L2's capacity holds no chunk")
	}
	lru, err := simplelru.NewLRU[uint64, struct{}](chunks, nil)
	if err != nil {
		return nil, fmt.Errorf("l2learn: %w", err)
	}
	return &Learner{chunk: cfg.ChunkTokens, lru: lru}, nil
}

// Learn takes the whole chunks of a prompt a worker prefilled, given as its
// block keys at that worker's block size (kvindex.AppendKeys, seeded by
// model and adapter), as in the L2, most recently used. Blocks that do not
// divide a chunk cannot mark its end and are not learned. A fleet shares
// one block size; keys learned at another are dropped when it changes,
// since no lookup would match them.
func (l *Learner) Learn(keys []uint64, block int) {
	if block < 1 || l.chunk%block != 0 {
		return
	}
	per := l.chunk / block
	l.mu.Lock()
	defer l.mu.Unlock()
	if block != l.block {
		l.lru.Purge()
		l.block = block
	}
	for i := per - 1; i < len(keys); i += per {
		l.lru.Add(keys[i], struct{}{})
	}
}

// Leading implements strategy.L2View: the prompt's leading tokens, in whole
// chunks, the view holds for model and adapter (lora; "" for the base
// model). It hashes one chunk at a time and stops at the first the view
// lacks.
func (l *Learner) Leading(model, lora string, tokens []uint32) int {
	l.mu.Lock()
	block := l.block
	l.mu.Unlock()
	if block == 0 {
		return 0
	}
	parent := kvindex.Seed(model, lora)
	var keys []uint64
	n := 0
	for n+l.chunk <= len(tokens) {
		keys = kvindex.AppendKeys(keys[:0], parent, tokens[n:n+l.chunk], block)
		parent = keys[len(keys)-1]
		l.mu.Lock()
		ok := l.lru.Contains(parent)
		l.mu.Unlock()
		if !ok {
			break
		}
		n += l.chunk
	}
	return n
}

// ChunkTokens is the L2's chunk size in tokens.
func (l *Learner) ChunkTokens() int { return l.chunk }

// Chunks is how many chunks the view holds.
func (l *Learner) Chunks() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lru.Len()
}
