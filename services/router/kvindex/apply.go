package kvindex

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/warmpath/warmpath/libs/kvevents"
)

// block is what a worker's engine hash stands for: its router key and the
// copies the worker holds per tier. Blocks live in a slice, linked into an
// LRU list by slot number (0 = none), as the index's entries are.
type block struct {
	hash       uint64 // the engine hash (its 64-bit form)
	key        uint64 // router key of the last GPU-sized block it covers
	prev, next uint32
	refs       [NumTiers]uint8
	spans      uint8  // tiers whose copy has an entry in Worker.spans
	size       uint32 // tokens in the block
	// tl is the block's place in the CPU and L2 tiers' LRU lists while
	// held there (tl[t-1]). The GPU tier needs none: vLLM reports its
	// removals, so the view never evicts it.
	tl [NumTiers - 1]link
}

// Worker applies one worker's KV events to the index. Its engine-hash map
// holds what the worker currently caches (its events remove entries); so
// that a removal the router never saw (a lost batch) cannot keep an entry
// forever, it is also bounded (MaxWorkerBlocks): beyond it the least
// recently stored or used block is forgotten, and taken out of the index
// too, which costs a future match, never correctness. One goroutine feeds
// one worker; Prefilled, Tiers and Held may be called from any.
type Worker struct {
	// mu guards the state below against Held, the one reader outside the
	// feeding goroutine; uncontended otherwise.
	mu     sync.Mutex
	sink   Sink
	change Change // the batch being applied
	name   string
	model  string
	seed   uint64
	slots  map[uint64]uint32 // engine hash -> slot in blocks
	blocks []block           // blocks[0] is the LRU list's sentinel
	free   []uint32
	// spans holds the keys of blocks larger than the GPU block (an
	// LMCache chunk is 256 tokens, a vLLM block 16): they are indexed as
	// the GPU-sized blocks they cover, so lookups at the worker's block
	// size find them, and a removal must take all of them back.
	spans    map[span][]uint64
	spanKeys int // keys held in spans
	// max bounds len(slots) + spanKeys: what the worker remembers, in
	// blocks and the GPU-sized keys of its spans.
	max int
	// gran is the worker's GPU block size, learned from its GPU events.
	gran  int
	keys  []uint64
	stats *Counters

	// How each tier is known (SetTier), and what the view holds of it:
	// blocks and tokens per tier, the slower tiers' blocks in LRU lists
	// (blocks[0].tl[t-1] is tier t's sentinel), shadowed tiers' blocks by
	// key.
	policy [NumTiers]TierPolicy
	tokens [NumTiers]int
	held   [NumTiers]int
	tv     [NumTiers]TierView
	byKey  map[tierKey]uint32
	in     inbox
	view   atomic.Pointer[[NumTiers]TierView]
}

// span names one tier's copy of a block larger than the GPU block.
type span struct {
	hash uint64
	tier Tier
}

// defaultGranularity is the block size keys are cut at before a worker's
// first GPU event says otherwise: vLLM's default on CUDA.
const defaultGranularity = 16

// DefaultMaxWorkerBlocks is the default bound on one worker's event state
// (engine blocks plus the keys of its spans): 262144, 4M tokens in blocks
// of 16, beyond any one worker's GPU and CPU caches today, at about 88
// bytes each (22 MiB a worker).
const DefaultMaxWorkerBlocks = 1 << 18

// WorkerBounder is implemented by sinks configured with a bound on each
// worker's event state; NewWorker takes it from its sink
// (DefaultMaxWorkerBlocks otherwise).
type WorkerBounder interface {
	MaxWorkerBlocks() int
}

// Counters are a feed's event statistics; every field is updated
// atomically and may be read at any time.
type Counters struct {
	Batches, Events        atomic.Uint64
	Stored, Removed        atomic.Uint64 // blocks
	Cleared                atomic.Uint64 // AllBlocksCleared events
	UnknownParent, Invalid atomic.Uint64 // BlockStored events not indexed
	Gaps, Restarts         atomic.Uint64
	Replays, ReplayErrors  atomic.Uint64
	Replayed, Lost         atomic.Uint64 // batches recovered; batches a replay could not return
	DecodeErrors           atomic.Uint64
	CommitErrors           atomic.Uint64 // batches the sink (Redis) failed to take
	// Forgotten counts blocks dropped to keep the worker's state within
	// MaxWorkerBlocks (their removal was lost, or the bound is below the
	// worker's cache).
	Forgotten atomic.Uint64

	// lastRejection is the latest BlockStored event not indexed, for
	// operators (/debug/endpoints, the subscriber's log).
	lastRejection atomic.Pointer[Rejection]
}

// Rejection describes a BlockStored event the index could not take.
type Rejection struct {
	Reason string    `json:"reason"` // "unknown_parent" or "invalid"
	Detail string    `json:"detail"`
	At     time.Time `json:"at"`
}

// Rejected counts the BlockStored events not indexed.
func (c *Counters) Rejected() uint64 { return c.UnknownParent.Load() + c.Invalid.Load() }

// LastRejection returns the latest event not indexed; nil if none.
func (c *Counters) LastRejection() *Rejection { return c.lastRejection.Load() }

func (c *Counters) reject(n *atomic.Uint64, reason, detail string) {
	n.Add(1)
	c.lastRejection.Store(&Rejection{Reason: reason, Detail: detail, At: time.Now()})
}

// NewWorker returns the event state of worker (its index name) serving
// model. Its state is bounded by sink's MaxWorkerBlocks when sink is a
// WorkerBounder.
func NewWorker(sink Sink, name, model string, c *Counters) *Worker {
	if c == nil {
		c = &Counters{}
	}
	limit := DefaultMaxWorkerBlocks
	if b, ok := sink.(WorkerBounder); ok && b.MaxWorkerBlocks() > 0 {
		limit = b.MaxWorkerBlocks()
	}
	return &Worker{
		sink: sink, name: name, model: model, seed: Seed(model, ""),
		slots: map[uint64]uint32{}, blocks: make([]block, 1), spans: map[span][]uint64{}, byKey: map[tierKey]uint32{},
		max: limit, stats: c,
	}
}

// Size returns what the worker's state holds, in the units of its bound:
// blocks plus the keys of its spans.
func (w *Worker) Size() int { return len(w.slots) + w.spanKeys }

// Stats returns the worker's counters.
func (w *Worker) Stats() *Counters { return w.stats }

// Apply applies the events of one batch in order and commits them to the
// sink as one change (seq and hash name the batch, for sinks shared by
// several routers).
func (w *Worker) Apply(b kvevents.Batch) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.begin()
	w.apply(b)
	w.commit(0, 0)
}

func (w *Worker) begin() {
	reset := w.change.Reset
	w.change = Change{Worker: w.name, Reset: reset, Ops: w.change.Ops[:0]}
	w.drainInbox()
}

func (w *Worker) commit(seq, hash uint64) {
	w.change.Seq, w.change.Hash = seq, hash
	if err := w.sink.Commit(&w.change); err != nil {
		w.stats.CommitErrors.Add(1)
	}
	w.change.Reset = false
	w.publishView()
}

func (w *Worker) apply(b kvevents.Batch) {
	w.stats.Batches.Add(1)
	for _, ev := range b.Events {
		w.stats.Events.Add(1)
		switch e := ev.(type) {
		case kvevents.BlockStored:
			w.stored(&e)
		case kvevents.BlockRemoved:
			w.removed(&e)
		case kvevents.AllBlocksCleared:
			w.cleared()
		}
	}
	// Capacity is enforced once the whole batch is in: within one, a tier
	// that reports removals announces a store before the eviction it
	// caused, and the view must not evict in its own order meanwhile.
	for t := range NumTiers {
		w.fit(t)
	}
}

func (w *Worker) stored(ev *kvevents.BlockStored) {
	n := len(ev.BlockHashes)
	if n == 0 || ev.BlockSize <= 0 || len(ev.TokenIDs) != n*ev.BlockSize {
		w.stats.reject(&w.stats.Invalid, "invalid", fmt.Sprintf("%d block hashes, block size %d, %d token ids", n, ev.BlockSize, len(ev.TokenIDs)))
		return
	}
	parent := w.seed
	if ev.LoRAName != "" {
		parent = Seed(w.model, ev.LoRAName)
	}
	if ev.ParentBlockHash != nil {
		ps, ok := w.slots[ev.ParentBlockHash.Uint64()]
		switch {
		case ok:
			w.touch(ps) // a parent in use is not forgotten before its children
			parent = w.blocks[ps].key
		case ev.ParentBlockHash.IsZero():
			// Some publishers encode "no parent" as 0 rather than nil;
			// llm-d's indexer reads it as a root block too. A block that
			// really hashes to 0 is found above first.
		default:
			// The chain before this block was never seen (the router
			// started mid-stream and replay could not reach back): its key
			// cannot be known, and a guess would credit the wrong prompts.
			w.stats.reject(&w.stats.UnknownParent, "unknown_parent", fmt.Sprintf("parent block hash %d not indexed for this worker", ev.ParentBlockHash.Uint64()))
			return
		}
	}
	tier := TierOf(ev.Medium)
	if tier == GPU {
		w.gran = ev.BlockSize
	}
	// A block of a slower tier spanning several GPU blocks is keyed as
	// those GPU blocks; a size that is not a multiple keeps its own keys
	// (which lookups at the GPU block size do not find).
	keySize, per := ev.BlockSize, 1
	if g := cmp.Or(w.gran, defaultGranularity); tier != GPU && ev.BlockSize > g && ev.BlockSize%g == 0 {
		keySize, per = g, ev.BlockSize/g
	}
	w.keys = AppendKeys(w.keys[:0], parent, ev.TokenIDs, keySize)
	// Only new copies go to the index: a tier that never reports removals
	// re-announces a block it still holds, which is a touch, not a second
	// copy the index would wait for a second removal of.
	added := make([]uint64, 0, len(w.keys))
	for i, h := range ev.BlockHashes {
		covered := w.keys[i*per : (i+1)*per]
		if _, ok := w.hold(h.Uint64(), tier, covered, ev.BlockSize); ok {
			added = append(added, covered...)
		}
	}
	w.stats.Stored.Add(uint64(n))
	if len(added) > 0 {
		w.change.Ops = append(w.change.Ops, Op{Kind: OpAdd, Tier: tier, Keys: added})
	}
	// After the add, so the index sees a forgotten block's removal after
	// its store.
	w.shrink()
}

func (w *Worker) removed(ev *kvevents.BlockRemoved) {
	tier := TierOf(ev.Medium)
	w.keys = w.keys[:0]
	var n uint64
	for _, h := range ev.BlockHashes {
		s, ok := w.slots[h.Uint64()]
		if !ok || w.blocks[s].refs[tier] == 0 {
			continue
		}
		n++
		b := &w.blocks[s]
		id := span{h.Uint64(), tier}
		if b.spans&(1<<tier) != 0 {
			w.keys = append(w.keys, w.spans[id]...)
		} else {
			w.keys = append(w.keys, b.key)
		}
		if b.refs[tier] == 1 {
			w.dropTier(s, tier)
		} else {
			b.refs[tier]--
		}
		if b.refs == ([NumTiers]uint8{}) {
			w.release(s)
		}
	}
	w.stats.Removed.Add(n)
	if len(w.keys) > 0 {
		w.change.Ops = append(w.change.Ops, Op{Kind: OpRemove, Tier: tier, Keys: slices.Clone(w.keys)})
	}
}

// cleared handles AllBlocksCleared: vLLM's GPU prefix cache was reset.
func (w *Worker) cleared() {
	w.stats.Cleared.Add(1)
	w.change.Ops = append(w.change.Ops, Op{Kind: OpClear, Tier: GPU})
	for s := w.blocks[0].next; s != 0; {
		next := w.blocks[s].next
		w.dropTier(s, GPU)
		if w.blocks[s].refs == ([NumTiers]uint8{}) {
			w.release(s)
		}
		s = next
	}
}

// Reset forgets everything the worker held: it restarted. The sink drops
// it at once (a change with no batch), and again with the next committed
// batch, so a restarted worker that has published nothing yet is not
// credited with its old process's blocks.
func (w *Worker) Reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	clear(w.slots)
	w.blocks = w.blocks[:1]
	w.blocks[0] = block{}
	w.free = w.free[:0]
	clear(w.spans)
	w.spanKeys = 0
	clear(w.byKey)
	w.tokens, w.held = [NumTiers]int{}, [NumTiers]int{}
	w.change = Change{Worker: w.name, Reset: true, ResetOnly: true, Ops: w.change.Ops[:0]}
	if err := w.sink.Commit(&w.change); err != nil {
		w.stats.CommitErrors.Add(1)
	}
	w.change.ResetOnly = false // Reset stays set for the next batch
}

// alloc gives engine hash h a slot at the front of the LRU list.
func (w *Worker) alloc(h uint64) uint32 {
	var s uint32
	if n := len(w.free); n > 0 {
		s = w.free[n-1]
		w.free = w.free[:n-1]
	} else {
		s = uint32(len(w.blocks))
		w.blocks = append(w.blocks, block{})
	}
	w.blocks[s] = block{hash: h}
	w.slots[h] = s
	w.pushFront(s)
	return s
}

// release forgets the block in slot s (its spans must be gone).
func (w *Worker) release(s uint32) {
	w.unlink(s)
	delete(w.slots, w.blocks[s].hash)
	w.blocks[s] = block{}
	w.free = append(w.free, s)
}

func (w *Worker) dropSpan(s uint32, tier Tier) {
	id := span{w.blocks[s].hash, tier}
	w.spanKeys -= len(w.spans[id])
	delete(w.spans, id)
	w.blocks[s].spans &^= 1 << tier
}

// shrink forgets the least recently stored or used blocks until the
// worker's state is within its bound, and removes them from the index: a
// block whose removal was lost ages out instead of staying forever.
func (w *Worker) shrink() {
	for w.Size() > w.max {
		s := w.blocks[0].prev
		if s == 0 {
			return
		}
		for t := range NumTiers {
			if w.blocks[s].refs[t] == 0 {
				continue
			}
			w.removeOp(s, t)
			w.dropTier(s, t)
		}
		w.release(s)
		w.stats.Forgotten.Add(1)
	}
}

// touch marks slot s most recently used.
func (w *Worker) touch(s uint32) {
	w.unlink(s)
	w.pushFront(s)
}

func (w *Worker) unlink(s uint32) {
	b := &w.blocks[s]
	w.blocks[b.prev].next = b.next
	w.blocks[b.next].prev = b.prev
	b.prev, b.next = 0, 0
}

func (w *Worker) pushFront(s uint32) {
	head := w.blocks[0].next
	w.blocks[s].prev, w.blocks[s].next = 0, head
	w.blocks[head].prev = s
	w.blocks[0].next = s
}

// Restart is Reset for a restart learnt from outside the stream (the
// worker's health or process start time): the worker's next message is
// taken as the first of a new process, caught up through replay from 0.
func (f *Feed) Restart() {
	f.w.stats.Restarts.Add(1)
	f.w.Reset()
	f.seen, f.next = false, 0
	f.closeDupWindow()
}

// Replayer fetches a worker's buffered batches from seq on (vLLM's replay
// socket); kvzmq.Replay over a worker's replay endpoint is one.
type Replayer interface {
	Replay(ctx context.Context, from uint64) ([]kvevents.Message, error)
}

// Feed puts one worker's event stream into the index in order: it tracks
// sequence numbers, repairs gaps through the worker's replay socket, and
// clears the worker when its sequence goes backwards (a restart).
type Feed struct {
	w      *Worker
	replay Replayer // nil: gaps are counted, not repaired
	next   uint64
	seen   bool
	// After a replay (Sync, or a gap filled because a message overtook
	// others or was dropped), live messages the replay already applied may
	// still arrive: seqs in [dupFrom, next) are skipped until the stream
	// reaches next, instead of being taken for a restart — unless dups
	// holds another payload's hash for the seq, which only a new process
	// publishes.
	dupFrom   uint64
	dupWindow bool
	dups      map[uint64]uint64
	// lastHash is the hash of the last applied batch's payload: replayed
	// again on a reconnect, a different payload under the same seq means
	// a new publisher process.
	lastHash uint64
}

// NewFeed returns a feed into w; replay may be nil.
func NewFeed(w *Worker, replay Replayer) *Feed {
	return &Feed{w: w, replay: replay}
}

// Worker returns the feed's worker state.
func (f *Feed) Worker() *Worker { return f.w }

// Handle applies one live message. A first message past seq 0 (the router
// joined late), a gap or a restart fetch the missing batches first; what
// replay cannot return is counted as lost. The error reports a replay that
// failed; the live message is applied regardless.
func (f *Feed) Handle(ctx context.Context, m kvevents.Message) error {
	var err error
	switch {
	case !f.seen:
		f.seen = true
		if m.Seq > 0 {
			err = f.fill(ctx, 0, m.Seq)
		}
	case m.Seq == f.next:
		f.closeDupWindow()
	case f.dupWindow && m.Seq < f.next && m.Seq >= f.dupFrom && f.replayed(m):
		return nil // already applied from the replay
	case m.Seq > f.next:
		f.closeDupWindow()
		f.w.stats.Gaps.Add(1)
		err = f.fill(ctx, f.next, m.Seq)
	default:
		// Sequence numbers restart at 0 with the publisher: what the
		// index holds for this worker is gone with its old process.
		f.w.stats.Restarts.Add(1)
		f.w.Reset()
		if m.Seq > 0 {
			err = f.fill(ctx, 0, m.Seq)
		}
	}
	f.apply(m)
	return err
}

// Sync catches up through the worker's replay buffer after a (re)connect,
// when no live message may come for a long time: on a first subscription
// it applies the whole buffer; on a reconnect, what came after the last
// batch applied — unless the worker restarted meanwhile (the batch at the
// last applied seq is gone or different), which resets the worker and
// applies the new process's buffer from the start.
func (f *Feed) Sync(ctx context.Context) error {
	if f.replay == nil {
		return nil
	}
	from := uint64(0)
	if f.seen && f.next > 0 {
		from = f.next - 1
	}
	f.w.stats.Replays.Add(1)
	msgs, err := f.replay.Replay(ctx, from)
	if err != nil {
		f.w.stats.ReplayErrors.Add(1)
		return fmt.Errorf("kvindex: sync %s from %d: %w", f.w.name, from, err)
	}
	if f.seen && f.next > 0 {
		restarted := len(msgs) == 0 || (msgs[0].Seq == from && xxhash.Sum64(msgs[0].Payload) != f.lastHash)
		if restarted {
			f.w.stats.Restarts.Add(1)
			f.w.Reset()
			f.seen, f.next = false, 0
			f.w.stats.Replays.Add(1)
			if msgs, err = f.replay.Replay(ctx, 0); err != nil {
				f.w.stats.ReplayErrors.Add(1)
				return fmt.Errorf("kvindex: sync %s from 0: %w", f.w.name, err)
			}
			from = 0
		}
	}
	f.closeDupWindow()
	applied := uint64(0)
	for _, m := range msgs {
		if f.seen && m.Seq < f.next {
			continue
		}
		if f.seen && m.Seq > f.next {
			f.w.stats.Lost.Add(m.Seq - f.next)
		}
		f.seen = true
		f.applyReplayed(m)
		applied++
	}
	f.w.stats.Replayed.Add(applied)
	if applied > 0 {
		f.openDupWindow(from)
	}
	return nil
}

// maxDupHashes bounds the payload hashes kept for a duplicate window: a
// replay of a whole buffer (vLLM keeps 10,000 steps) remembers its first
// ones only, and a late message past them is taken for a duplicate by its
// seq alone.
const maxDupHashes = 1024

// openDupWindow opens the duplicate window at from; the replay's batches
// were recorded by applyReplayed.
func (f *Feed) openDupWindow(from uint64) {
	f.dupFrom, f.dupWindow = from, true
}

func (f *Feed) closeDupWindow() {
	f.dupWindow = false
	clear(f.dups)
}

// replayed says a live m inside the duplicate window is the batch a replay
// applied under its seq, not another process's.
func (f *Feed) replayed(m kvevents.Message) bool {
	h, ok := f.dups[m.Seq]
	return !ok || h == xxhash.Sum64(m.Payload)
}

// applyReplayed applies a batch from replay, remembering its payload's
// hash for the duplicate window.
func (f *Feed) applyReplayed(m kvevents.Message) {
	f.apply(m)
	if f.dups == nil {
		f.dups = make(map[uint64]uint64)
	}
	if len(f.dups) < maxDupHashes {
		f.dups[m.Seq] = f.lastHash
	}
}

func (f *Feed) apply(m kvevents.Message) {
	b, err := kvevents.DecodeBatch(m.Payload)
	f.next = m.Seq + 1
	f.lastHash = xxhash.Sum64(m.Payload)
	f.w.mu.Lock()
	defer f.w.mu.Unlock()
	f.w.begin()
	if err != nil {
		f.w.stats.DecodeErrors.Add(1)
	} else {
		f.w.apply(b)
	}
	// Committed even when empty: a shared sink tracks every seq.
	f.w.commit(m.Seq, f.lastHash)
}

// fill applies the batches [from, to) from the worker's replay buffer.
func (f *Feed) fill(ctx context.Context, from, to uint64) error {
	if f.replay == nil {
		f.w.stats.Lost.Add(to - from)
		return nil
	}
	f.closeDupWindow() // its hashes are of batches before these
	f.w.stats.Replays.Add(1)
	msgs, err := f.replay.Replay(ctx, from)
	got := uint64(0)
	for _, m := range msgs {
		if m.Seq < from || m.Seq >= to {
			continue
		}
		f.applyReplayed(m)
		got++
	}
	f.w.stats.Replayed.Add(got)
	if got > 0 {
		f.openDupWindow(from)
	}
	f.w.stats.Lost.Add(to - from - got)
	if err != nil {
		f.w.stats.ReplayErrors.Add(1)
		return fmt.Errorf("kvindex: replay %s from %d: %w", f.w.name, from, err)
	}
	return nil
}
