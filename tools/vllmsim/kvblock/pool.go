// Package kvblock models vLLM's GPU KV block pool with automatic prefix
// caching: a fixed number of blocks of block_size tokens, reference counts,
// full blocks registered under their content hash, freed blocks kept cached
// in an LRU free queue and evicted only when a new block is needed.
//
// The pool is a single-threaded core (no locks): the engine that owns it
// serialises access. It records the KV-cache events vLLM would publish
// (BlockStored, BlockRemoved, AllBlocksCleared) for the caller to drain.
package kvblock

import (
	"errors"

	"github.com/warmpath/warmpath/libs/blockhash"
)

// ID identifies a block in the pool, 0 ≤ ID < NumBlocks.
type ID int32

const none ID = -1

// EventKind tells what an Event records.
type EventKind uint8

// Event kinds, matching vLLM's KV-cache event types.
const (
	Stored EventKind = iota + 1
	Removed
	Cleared
)

// Event is one KV-cache event in the order the pool produced it. For Stored,
// Hashes are consecutive blocks of one sequence, Parent is the hash of the
// block before the first (nil at sequence start) and Tokens holds the token
// ids of all stored blocks. For Removed, Hashes lists evicted blocks.
type Event struct {
	Kind   EventKind
	Hashes []blockhash.Hash
	Parent *blockhash.Hash
	Tokens []uint32
	// BlockSize is the number of tokens per block.
	BlockSize int
	// Medium is the tier holding the blocks: "GPU" for this pool; LMCache's
	// L1 reports "CPU".
	Medium string
}

// MediumGPU is the Medium of the pool's events.
const MediumGPU = "GPU"

type block struct {
	ref    int32
	hashed bool
	hash   blockhash.Hash
	// prev and next link the block into the free queue; inFree says it is there.
	prev, next ID
	inFree     bool
}

// Pool is vLLM's block pool. The zero value is not usable; call New.
type Pool struct {
	blockSize int
	caching   bool
	blocks    []block
	// free queue: head is evicted first. Blocks with ref 0 live here, cached
	// or not, so a hit on a freed block revives it without recomputation.
	head, tail ID
	numFree    int
	// cached maps a hash to every block holding it. vLLM does not deduplicate
	// physical copies (two requests may compute the same block at once), and
	// publishes a Stored and a Removed event for each copy.
	cached map[blockhash.Hash][]ID
	events []Event
}

// New returns a pool of numBlocks blocks of blockSize tokens. With caching
// false, no block is ever registered or reused (vLLM without
// --enable-prefix-caching).
func New(numBlocks, blockSize int, caching bool) *Pool {
	if numBlocks <= 0 || blockSize <= 0 {
		panic("kvblock: numBlocks and blockSize must be positive")
	}
	p := &Pool{
		blockSize: blockSize,
		caching:   caching,
		blocks:    make([]block, numBlocks),
		head:      none,
		tail:      none,
		cached:    make(map[blockhash.Hash][]ID),
	}
	for i := range p.blocks {
		p.blocks[i].prev, p.blocks[i].next = none, none
		p.pushTail(ID(i))
	}
	return p
}

// BlockSize returns the number of tokens per block.
func (p *Pool) BlockSize() int { return p.blockSize }

// NumBlocks returns the pool's capacity in blocks.
func (p *Pool) NumBlocks() int { return len(p.blocks) }

// NumFree returns how many blocks have no reference (cached or empty).
func (p *Pool) NumFree() int { return p.numFree }

// NumCached returns how many blocks hold a registered hash.
func (p *Pool) NumCached() int {
	n := 0
	for _, ids := range p.cached {
		n += len(ids)
	}
	return n
}

// CachedHashes returns each registered hash with its number of physical
// copies.
func (p *Pool) CachedHashes() map[blockhash.Hash]int {
	out := make(map[blockhash.Hash]int, len(p.cached))
	for h, ids := range p.cached {
		out[h] = len(ids)
	}
	return out
}

// Usage is the fraction of blocks in use by requests (vLLM's
// kv_cache_usage_perc): cached-but-free blocks count as free.
func (p *Pool) Usage() float64 {
	return 1 - float64(p.numFree)/float64(len(p.blocks))
}

// Lookup returns the blocks holding the longest cached prefix of hashes.
// It does not take references; call Touch on the result to keep them.
func (p *Pool) Lookup(hashes []blockhash.Hash) []ID {
	if !p.caching {
		return nil
	}
	var out []ID
	for _, h := range hashes {
		ids := p.cached[h]
		if len(ids) == 0 {
			break
		}
		out = append(out, ids[0])
	}
	return out
}

// FreeAmong counts the blocks of ids that currently have no reference;
// touching them removes them from the free queue.
func (p *Pool) FreeAmong(ids []ID) int {
	n := 0
	for _, id := range ids {
		if p.blocks[id].ref == 0 {
			n++
		}
	}
	return n
}

// Touch takes a reference on each block, reviving freed cached blocks.
func (p *Pool) Touch(ids []ID) {
	for _, id := range ids {
		b := &p.blocks[id]
		if b.ref == 0 {
			p.unlink(id)
		}
		b.ref++
	}
}

// ErrNoSpace is returned when the pool cannot supply the blocks asked for.
var ErrNoSpace = errors.New("kvblock: not enough free blocks")

// Allocate takes n blocks from the head of the free queue (least recently
// freed first), evicting their cached hashes, and returns them with one
// reference each. It allocates nothing when fewer than n are free.
func (p *Pool) Allocate(n int) ([]ID, error) {
	if n > p.numFree {
		return nil, ErrNoSpace
	}
	out := make([]ID, 0, n)
	for range n {
		id := p.head
		p.unlink(id)
		p.evict(id)
		p.blocks[id].ref = 1
		out = append(out, id)
	}
	return out, nil
}

// Free drops one reference from each block. Callers pass a request's
// blocks in reverse order (as vLLM does), so a sequence's tail blocks reach
// the free queue first and are evicted before its shared head.
func (p *Pool) Free(ids []ID) {
	for _, id := range ids {
		b := &p.blocks[id]
		if b.ref <= 0 {
			panic("kvblock: double free")
		}
		b.ref--
		if b.ref == 0 {
			p.pushTail(id)
		}
	}
}

// Register records that blocks ids (full, consecutive blocks of one
// sequence) hold hashes, and emits one Stored event for those not already
// registered. parent is the hash before ids[0], nil at sequence start;
// tokens are the ids' token ids, BlockSize each.
func (p *Pool) Register(ids []ID, hashes []blockhash.Hash, parent *blockhash.Hash, tokens []uint32) {
	if !p.caching || len(ids) == 0 {
		return
	}
	ev := Event{Kind: Stored, Parent: parent, BlockSize: p.blockSize, Medium: MediumGPU}
	for i, id := range ids {
		b := &p.blocks[id]
		if b.hashed {
			// A prefix hit: already registered under this hash. A new run
			// restarts after it, so its parent is this block.
			if len(ev.Hashes) > 0 {
				p.events = append(p.events, ev)
			}
			h := b.hash
			ev = Event{Kind: Stored, Parent: &h, BlockSize: p.blockSize, Medium: MediumGPU}
			continue
		}
		b.hashed, b.hash = true, hashes[i]
		p.cached[hashes[i]] = append(p.cached[hashes[i]], id)
		ev.Hashes = append(ev.Hashes, hashes[i])
		ev.Tokens = append(ev.Tokens, tokens[i*p.blockSize:(i+1)*p.blockSize]...)
	}
	if len(ev.Hashes) > 0 {
		p.events = append(p.events, ev)
	}
}

// Reset drops every cached hash, as vLLM's reset_prefix_cache does, and
// emits AllBlocksCleared. Like vLLM it refuses while any block is in use.
func (p *Pool) Reset() bool {
	if p.numFree != len(p.blocks) {
		return false
	}
	for i := range p.blocks {
		p.blocks[i].hashed = false
	}
	clear(p.cached)
	p.events = append(p.events, Event{Kind: Cleared})
	return true
}

// TakeEvents returns the events recorded since the last call.
func (p *Pool) TakeEvents() []Event {
	ev := p.events
	p.events = nil
	return ev
}

func (p *Pool) evict(id ID) {
	b := &p.blocks[id]
	if !b.hashed {
		return
	}
	ids := p.cached[b.hash]
	for i, other := range ids {
		if other == id {
			ids = append(ids[:i], ids[i+1:]...)
			break
		}
	}
	if len(ids) == 0 {
		delete(p.cached, b.hash)
	} else {
		p.cached[b.hash] = ids
	}
	p.events = append(p.events, Event{Kind: Removed, Hashes: []blockhash.Hash{b.hash}, BlockSize: p.blockSize, Medium: MediumGPU})
	b.hashed = false
}

func (p *Pool) pushTail(id ID) {
	b := &p.blocks[id]
	b.prev, b.next, b.inFree = p.tail, none, true
	if p.tail != none {
		p.blocks[p.tail].next = id
	} else {
		p.head = id
	}
	p.tail = id
	p.numFree++
}

func (p *Pool) unlink(id ID) {
	b := &p.blocks[id]
	if !b.inFree {
		panic("kvblock: unlink of a block not in the free queue")
	}
	if b.prev != none {
		p.blocks[b.prev].next = b.next
	} else {
		p.head = b.next
	}
	if b.next != none {
		p.blocks[b.next].prev = b.prev
	} else {
		p.tail = b.prev
	}
	b.prev, b.next, b.inFree = none, none, false
	p.numFree--
}
