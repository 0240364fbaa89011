// Package kvindex is the kvaware strategy's exact view of which worker holds
// which KV block, in which tier. It is plain Go — no network, no clock — so
// the router's event subscriber and the benchmark's discrete-event mode
// drive the very same code.
//
// Blocks are named by router-owned keys (keys.go): chained hashes of token
// ids, so the router never reproduces vLLM's hash. Each key records, per
// (worker, tier), how many times it was stored: a block stored twice needs
// two removals. The number of keys is bounded; beyond it the least recently
// stored key is dropped, which costs a future match, never correctness.
package kvindex

import (
	"strings"
	"sync"
)

// Tier is where a worker holds a block.
type Tier uint8

// Tiers, fastest first. L2 is the cluster-shared cache: a block there
// counts for every worker alike.
const (
	GPU Tier = iota
	CPU
	L2
	// NumTiers counts the tiers.
	NumTiers
)

// String names the tier as /debug/endpoints and metrics do.
func (t Tier) String() string {
	switch t {
	case GPU:
		return "gpu"
	case CPU:
		return "cpu"
	case L2:
		return "l2"
	}
	return "unknown"
}

// TierOf maps a KV event's medium to a tier: vLLM's GPU cache reports "GPU"
// (or nothing), LMCache's CPU offload "CPU" (and variants); anything else
// (disk, remote) is taken as the shared L2.
func TierOf(medium string) Tier {
	m := strings.ToUpper(medium)
	switch {
	case m == "" || m == "GPU" || strings.HasPrefix(m, "CUDA"):
		return GPU
	case strings.HasPrefix(m, "CPU") || strings.Contains(m, "CPU"):
		return CPU
	}
	return L2
}

// holder is one worker's copies of a block in one tier.
type holder struct {
	worker uint16
	tier   Tier
	refs   uint8 // saturates at 255, after which the copies are never counted down
}

// entry is one indexed key. Entries live in a slice and are linked into an
// LRU list by slot number (0 = none), which keeps each entry small and the
// garbage collector out of the hot path. The first holders are stored in
// the entry itself, so a lookup touches one cache line per block.
type entry struct {
	key        uint64
	prev, next uint32
	spill      *[]holder // holders beyond the inline ones
	inline     [inlineHolders]holder
	n          uint8
}

const inlineHolders = 3

func (e *entry) len() int { return int(e.n) }

func (e *entry) at(i int) *holder {
	if i < inlineHolders {
		return &e.inline[i]
	}
	return &(*e.spill)[i-inlineHolders]
}

func (e *entry) add(h holder) {
	if e.n < inlineHolders {
		e.inline[e.n] = h
	} else {
		if e.spill == nil {
			e.spill = new([]holder)
		}
		*e.spill = append(*e.spill, h)
	}
	e.n++
}

// del removes holder i, moving the last one into its place.
func (e *entry) del(i int) {
	last := e.len() - 1
	*e.at(i) = *e.at(last)
	if last >= inlineHolders {
		*e.spill = (*e.spill)[:last-inlineHolders]
	}
	e.n--
}

// Index maps block keys to the workers holding them. It is safe for
// concurrent use: lookups share a read lock, updates take the write lock.
type Index struct {
	mu       sync.RWMutex
	slots    map[uint64]uint32
	entries  []entry // entries[0] is the LRU list's sentinel
	free     []uint32
	max      int
	workers  map[string]uint16
	names    []string // by worker id; "" for a free id
	freeIDs  []uint16
	counts   [][NumTiers]int // blocks held per worker id and tier
	evicted  uint64
	overflow uint64
	// maxWorker bounds the event state of each Worker feeding the index
	// (see WorkerBounder).
	maxWorker int
}

// Limits bound an index and the event state of the workers feeding it.
type Limits struct {
	// MaxKeys bounds the block keys indexed (>= 1); beyond it the least
	// recently stored key is dropped.
	MaxKeys int
	// MaxWorkerBlocks bounds each Worker's engine-hash state (blocks plus
	// the GPU-sized keys of larger blocks); 0 means DefaultMaxWorkerBlocks,
	// and it is never above MaxKeys.
	MaxWorkerBlocks int
}

// New returns an index holding at most maxKeys keys (>= 1), whose workers
// keep at most min(DefaultMaxWorkerBlocks, maxKeys) blocks each.
func New(maxKeys int) *Index {
	return NewBounded(Limits{MaxKeys: maxKeys})
}

// NewBounded returns an index within l.
func NewBounded(l Limits) *Index {
	maxKeys := max(l.MaxKeys, 1)
	if l.MaxWorkerBlocks <= 0 {
		l.MaxWorkerBlocks = DefaultMaxWorkerBlocks
	}
	return &Index{
		slots:     make(map[uint64]uint32, min(maxKeys, 1<<16)),
		entries:   make([]entry, 1, min(maxKeys, 1<<16)+1),
		max:       maxKeys,
		workers:   map[string]uint16{},
		maxWorker: min(l.MaxWorkerBlocks, maxKeys),
	}
}

// MaxWorkerBlocks implements WorkerBounder: the bound on each feeding
// Worker's state.
func (x *Index) MaxWorkerBlocks() int { return x.maxWorker }

// workerID returns the id of a worker, assigning one; mu must be held for
// writing. ok is false when every id is taken.
func (x *Index) workerID(name string) (uint16, bool) {
	if id, ok := x.workers[name]; ok {
		return id, true
	}
	var id uint16
	switch {
	case len(x.freeIDs) > 0:
		id = x.freeIDs[len(x.freeIDs)-1]
		x.freeIDs = x.freeIDs[:len(x.freeIDs)-1]
		x.names[id] = name
	case len(x.names) <= int(^uint16(0)):
		id = uint16(len(x.names))
		x.names = append(x.names, name)
		x.counts = append(x.counts, [NumTiers]int{})
	default:
		return 0, false
	}
	x.workers[name] = id
	return id, true
}

// Add records one more copy of each key at worker in tier, and marks the
// keys most recently stored.
func (x *Index) Add(worker string, tier Tier, keys []uint64) {
	if len(keys) == 0 {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	w, ok := x.workerID(worker)
	if !ok {
		x.overflow++
		return
	}
	for _, k := range keys {
		s, ok := x.slots[k]
		if !ok {
			s = x.alloc(k)
		} else {
			x.unlink(s)
		}
		x.pushFront(s)
		e := &x.entries[s]
		found := false
		for i := range e.len() {
			if h := e.at(i); h.worker == w && h.tier == tier {
				if h.refs < ^uint8(0) {
					h.refs++
				}
				found = true
				break
			}
		}
		if !found {
			e.add(holder{worker: w, tier: tier, refs: 1})
			x.counts[w][tier]++
		}
	}
	for len(x.slots) > x.max {
		x.evict(x.entries[0].prev)
	}
}

// Remove drops one copy of each key at worker in tier; keys not held are
// ignored (their store was never indexed, or the key was evicted).
func (x *Index) Remove(worker string, tier Tier, keys []uint64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	w, ok := x.workers[worker]
	if !ok {
		return
	}
	for _, k := range keys {
		s, ok := x.slots[k]
		if !ok {
			continue
		}
		e := &x.entries[s]
		for i := range e.len() {
			h := e.at(i)
			if h.worker != w || h.tier != tier {
				continue
			}
			if h.refs > 1 && h.refs < ^uint8(0) {
				h.refs--
				break
			}
			x.dropHolder(s, i)
			break
		}
	}
}

// Clear drops everything worker holds in the given tiers (all tiers when
// none are given): a worker that restarted, reset its cache or left. It
// scans the index, so it is for rare events.
func (x *Index) Clear(worker string, tiers ...Tier) {
	x.mu.Lock()
	defer x.mu.Unlock()
	w, ok := x.workers[worker]
	if !ok {
		return
	}
	var mask uint8
	for _, t := range tiers {
		mask |= 1 << t
	}
	if mask == 0 {
		mask = 1<<NumTiers - 1
	}
	for s := x.entries[0].next; s != 0; {
		next := x.entries[s].next
		// Backwards: dropHolder moves the last holder into the gap.
		for i := x.entries[s].len() - 1; i >= 0; i-- {
			h := *x.entries[s].at(i)
			if h.worker != w || mask&(1<<h.tier) == 0 {
				continue
			}
			last := x.entries[s].len() == 1
			x.dropHolder(s, i)
			if last {
				break // the entry is gone
			}
		}
		s = next
	}
	if mask == 1<<NumTiers-1 {
		delete(x.workers, worker)
		x.names[w] = ""
		x.counts[w] = [NumTiers]int{}
		x.freeIDs = append(x.freeIDs, w)
	}
}

// dropHolder removes holder i of slot s, and the entry when it was the
// last; mu must be held for writing.
func (x *Index) dropHolder(s uint32, i int) {
	e := &x.entries[s]
	h := *e.at(i)
	x.counts[h.worker][h.tier]--
	e.del(i)
	if e.n == 0 {
		x.release(s)
	}
}

// alloc gives key k a slot. New slots are appended, so the blocks of one
// prompt, stored in order, sit next to each other — which Lookup exploits.
func (x *Index) alloc(k uint64) uint32 {
	var s uint32
	if n := len(x.free); n > 0 {
		s = x.free[n-1]
		x.free = x.free[:n-1]
		x.entries[s] = entry{key: k, spill: x.entries[s].spill}
	} else {
		s = uint32(len(x.entries))
		x.entries = append(x.entries, entry{key: k})
	}
	x.slots[k] = s
	return s
}

// release frees slot s, keeping its spill array for reuse.
func (x *Index) release(s uint32) {
	e := &x.entries[s]
	x.unlink(s)
	delete(x.slots, e.key)
	e.n = 0
	if e.spill != nil {
		*e.spill = (*e.spill)[:0]
	}
	x.free = append(x.free, s)
}

// evict drops the key in slot s with all its holders.
func (x *Index) evict(s uint32) {
	e := &x.entries[s]
	for i := range e.len() {
		h := e.at(i)
		x.counts[h.worker][h.tier]--
	}
	x.evicted++
	x.release(s)
}

func (x *Index) unlink(s uint32) {
	e := &x.entries[s]
	x.entries[e.prev].next = e.next
	x.entries[e.next].prev = e.prev
	e.prev, e.next = 0, 0
}

func (x *Index) pushFront(s uint32) {
	head := x.entries[0].next
	x.entries[s].prev, x.entries[s].next = 0, head
	x.entries[head].prev = s
	x.entries[0].next = s
}

// Match is how much of a prompt one worker can serve from cache: the
// number of leading blocks it holds in GPU, in GPU or CPU, and in GPU, CPU
// or the shared L2. GPU <= Local <= Any.
type Match struct {
	GPU, Local, Any int
}

// Lookup returns, for each worker, its Match for the block keys of one
// prompt (in order). Its cost is linear in the blocks matched by anyone,
// times the holders per block.
func (x *Index) Lookup(keys []uint64, workers []string, out []Match) []Match {
	out = out[:0]
	for range workers {
		out = append(out, Match{})
	}
	x.mu.RLock()
	defer x.mu.RUnlock()
	// pos maps a worker id to its place in workers (-1: not asked about).
	var posbuf [256]int16
	pos := posbuf[:0]
	if len(x.names) > len(posbuf) {
		pos = make([]int16, 0, len(x.names))
	}
	for range x.names {
		pos = append(pos, -1)
	}
	for i, name := range workers {
		if w, ok := x.workers[name]; ok && i < 1<<15 {
			pos[w] = int16(i)
		}
	}
	// Each worker's three runs (GPU, GPU+CPU, any tier) end at its first
	// block missing from that set of tiers; the walk ends when every run
	// has. bits collects, per asked worker, the tiers holding this block.
	var onbuf [64]uint8
	var bitbuf [64]uint8
	on, bits := onbuf[:0], bitbuf[:0]
	if len(workers) > len(onbuf) {
		on, bits = make([]uint8, 0, len(workers)), make([]uint8, 0, len(workers))
	}
	for range workers {
		on, bits = append(on, 0b111), append(bits, 0)
	}
	const gpuRun, localRun, anyRun = 1, 2, 4
	// The slot after a block's is checked first: blocks stored together
	// were given consecutive slots, so a chain is mostly walked without a
	// map probe (the key comparison keeps it exact).
	var s uint32
	var ok bool
	for n, k := range keys {
		if next := s + 1; s != 0 && int(next) < len(x.entries) && x.entries[next].key == k && x.entries[next].n > 0 {
			s = next
		} else if s, ok = x.slots[k]; !ok {
			break
		}
		e := &x.entries[s]
		var l2 uint8
		for i := range e.len() {
			h := e.at(i)
			if h.tier == L2 {
				l2 = 1 << L2
			} else if p := pos[h.worker]; p >= 0 {
				bits[p] |= 1 << h.tier
			}
		}
		live := false
		for i := range on {
			b := bits[i] | l2
			bits[i] = 0
			r := on[i]
			if b&(1<<GPU) == 0 {
				r &^= gpuRun
			}
			if b&(1<<GPU|1<<CPU) == 0 {
				r &^= localRun
			}
			if b == 0 {
				r &^= anyRun
			}
			on[i] = r
			if r&gpuRun != 0 {
				out[i].GPU = n + 1
			}
			if r&localRun != 0 {
				out[i].Local = n + 1
			}
			if r&anyRun != 0 {
				out[i].Any = n + 1
				live = true
			}
		}
		if !live {
			break
		}
	}
	return out
}

// Stats is the index's size, for metrics and /debug/endpoints.
type Stats struct {
	// Keys indexed, of at most MaxKeys.
	Keys, MaxKeys int
	// Blocks held per worker and tier.
	Blocks map[string][NumTiers]int
	// Evicted counts keys dropped for space; Overflow, stores dropped
	// because the index tracks the most workers it can.
	Evicted, Overflow uint64
}

// Stats returns a snapshot the caller owns.
func (x *Index) Stats() Stats {
	x.mu.RLock()
	defer x.mu.RUnlock()
	st := Stats{Keys: len(x.slots), MaxKeys: x.max, Blocks: make(map[string][NumTiers]int, len(x.workers)), Evicted: x.evicted, Overflow: x.overflow}
	for name, id := range x.workers {
		st.Blocks[name] = x.counts[id]
	}
	return st
}
