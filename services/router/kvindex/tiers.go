package kvindex

import (
	"cmp"
	"fmt"
	"sync"
)

// EventSource is what a worker's publisher reports about one tier, and so
// where the router's knowledge of that tier comes from.
type EventSource uint8

// Event sources.
const (
	// EventsFull: stores and removals (vLLM's GPU prefix cache). The index
	// follows the tier exactly.
	EventsFull EventSource = iota
	// EventsStoreOnly: stores, never removals (current LMCache's CPU tier:
	// its KV-event RFC, LMCache issue #1846, and the multi-process
	// connector's events, PR #5076). The worker keeps a shadow of the
	// tier bounded by its capacity and evicts it in LMCache's order.
	EventsStoreOnly
	// EventsNone: nothing (LMCache before event support, or combinations
	// that forward only vLLM's GPU events, LMCache issue #3532). The worker
	// learns the tier from the router's own routing: every whole chunk of a
	// prompt sent to it is taken as stored there, as LMCache stores every
	// prefilled chunk, within the same capacity bound.
	EventsNone
)

// String names the source as /debug/endpoints and the decision log do.
func (s EventSource) String() string {
	switch s {
	case EventsFull:
		return "events"
	case EventsStoreOnly:
		return "events+shadow"
	case EventsNone:
		return "routing"
	}
	return "unknown"
}

// ParseEventSource reads a tier's event mode as configured: "full",
// "store-only" or "none" (the simulator's --lmcache-kv-events names).
func ParseEventSource(s string) (EventSource, error) {
	switch s {
	case "full":
		return EventsFull, nil
	case "store-only":
		return EventsStoreOnly, nil
	case "none":
		return EventsNone, nil
	}
	return 0, fmt.Errorf("kvindex: unknown event mode %q (want full, store-only or none)", s)
}

// TierPolicy is how a worker's tier is known.
type TierPolicy struct {
	Events EventSource
	// CapacityTokens is the tier's size in tokens (its bytes over the
	// model's KV bytes per token); 0 means unknown. The worker's view of a
	// tier never holds more: beyond it, the least recently stored or
	// routed-to blocks are evicted from the view, as LMCache's LRU evicts
	// them. Without it a store-only tier is bounded only by
	// MaxWorkerBlocks, and an EventsNone tier learns nothing. Not applied
	// to the GPU tier, whose removals vLLM reports.
	CapacityTokens int
	// ChunkTokens is the tier's block size, for what an EventsNone tier
	// learns from routing (LMCache's chunk_size); 256 when 0.
	ChunkTokens int
}

// defaultChunkTokens is LMCache's default chunk_size.
const defaultChunkTokens = 256

// TierView is what a worker's view of one tier holds, for
// /debug/endpoints.
type TierView struct {
	Source         string `json:"source"`
	Blocks         int    `json:"blocks"`
	Tokens         int    `json:"tokens"`
	CapacityTokens int    `json:"capacity_tokens,omitempty"`
	// Evicted counts blocks the view evicted to stay within capacity.
	Evicted uint64 `json:"evicted"`
	// Learned counts blocks learned from routing (EventsNone).
	Learned uint64 `json:"learned"`
	// DroppedNotes counts prefilled prompts not applied because too many
	// were waiting (reported on the CPU tier: the notes serve every tier).
	DroppedNotes uint64 `json:"droppedNotes,omitempty"`
}

// link chains a block into one tier's LRU list (slot numbers, 0 = none).
type link struct{ prev, next uint32 }

// tierKey names a block's copy in one tier by the router key of its last
// GPU-sized block: what routing reports is keys, not engine hashes.
type tierKey struct {
	key  uint64
	tier Tier
}

// learnedMark marks the pseudo engine hash of a block learned from routing,
// so it cannot collide with a real block keyed alike.
const learnedMark = 0x9e3779b97f4a7c15

// maxInbox bounds the prefilled prompts' keys waiting for the feed goroutine;
// beyond it prefill notes are dropped (a later touch or learn is missed,
// which costs a future match, never correctness).
const maxInbox = 1 << 16

// inbox holds what routing reported since the feed last ran. It is the one
// part of a Worker other goroutines may reach.
type inbox struct {
	mu      sync.Mutex
	prompts [][]uint64
	keys    int
	dropped uint64
}

// SetTier sets how tier is known. Call it before the first event.
func (w *Worker) SetTier(t Tier, p TierPolicy) {
	if p.ChunkTokens <= 0 {
		p.ChunkTokens = defaultChunkTokens
	}
	w.policy[t] = p
}

// Prefilled tells the worker it finished the prefill of a prompt the
// router sent it, given as the prompt's block keys (at the worker's GPU
// block size, from the first block). It is safe for concurrent use: the
// note is applied with the next batch of events. Tiers that do not report
// evictions take the prompt's whole chunks as most recently used, held or
// learned (LMCache touches the chunks it held and stores the rest).
func (w *Worker) Prefilled(keys []uint64) {
	if len(keys) == 0 || !w.shadowed() {
		return
	}
	w.in.mu.Lock()
	defer w.in.mu.Unlock()
	if w.in.keys+len(keys) > maxInbox {
		w.in.dropped++
		return
	}
	w.in.prompts = append(w.in.prompts, keys)
	w.in.keys += len(keys)
}

// shadowed reports whether any tier is known other than by full events, so
// prefill notes matter. The policy is fixed before events start.
func (w *Worker) shadowed() bool {
	for _, p := range w.policy {
		if p.Events != EventsFull || p.CapacityTokens > 0 {
			return true
		}
	}
	return false
}

// drainInbox applies the prefill notes; on the feed goroutine.
func (w *Worker) drainInbox() {
	w.in.mu.Lock()
	prompts := w.in.prompts
	w.in.prompts, w.in.keys = nil, 0
	w.in.mu.Unlock()
	for _, keys := range prompts {
		for t := range NumTiers {
			switch p := w.policy[t]; {
			case p.Events != EventsFull && p.CapacityTokens >= p.ChunkTokens:
				w.learn(t, keys)
			case p.Events != EventsFull || p.CapacityTokens > 0:
				for _, k := range keys {
					if s, ok := w.byKey[tierKey{k, t}]; ok {
						w.touchTier(s, t)
					}
				}
			}
		}
	}
	for t := range NumTiers {
		w.fit(t)
	}
}

// learn takes every whole chunk of a prompt whose prefill ended as held in
// tier t, most recently used: LMCache stores every whole chunk it
// prefilled and touches those it held. For a store-only tier the events
// name the new chunks too (hold then rekeys the learned block); learning
// keeps the chunks LMCache held all along, which it never announces again,
// in the view when the view's order had evicted them.
func (w *Worker) learn(t Tier, keys []uint64) {
	gran := cmp.Or(w.gran, defaultGranularity)
	chunk := w.policy[t].ChunkTokens
	per := max(chunk/gran, 1)
	var added []uint64
	for i := 0; (i+1)*per <= len(keys); i++ {
		covered := keys[i*per : (i+1)*per]
		if s, ok := w.byKey[tierKey{covered[per-1], t}]; ok {
			w.touchTier(s, t)
			continue
		}
		if _, ok := w.hold(covered[per-1]^learnedMark, t, covered, chunk); ok {
			added = append(added, covered...)
			w.tv[t].Learned++
		}
	}
	if len(added) > 0 {
		w.change.Ops = append(w.change.Ops, Op{Kind: OpAdd, Tier: t, Keys: added})
	}
}

// hold records one copy of engine block h in tier t, covering keys (one
// key: the block is GPU-sized), size tokens long. For a tier that
// publishes removals every store is a copy; for the others a store of a
// block already held is a touch. ok reports a new copy the index must add.
func (w *Worker) hold(h uint64, t Tier, covered []uint64, size int) (s uint32, ok bool) {
	if w.policy[t].Events != EventsFull {
		// The chunk may be in the view already, learned from routing under
		// a key of the router's: the worker's event names it now.
		if s, ok := w.byKey[tierKey{covered[len(covered)-1], t}]; ok && w.blocks[s].hash != h {
			if _, taken := w.slots[h]; !taken && w.blocks[s].refs == tierOnly(t) {
				w.rekey(s, h, t)
			}
			w.touchTier(s, t)
			return s, false
		}
	}
	s, found := w.slots[h]
	if found {
		w.touch(s)
	} else {
		s = w.alloc(h)
	}
	b := &w.blocks[s]
	if b.refs[t] > 0 && w.policy[t].Events != EventsFull {
		w.touchTier(s, t)
		return s, false
	}
	b.key = covered[len(covered)-1] // the next block's parent
	if b.refs[t] == 0 {
		b.size = uint32(size)
		w.linkTier(s, t)
	}
	if b.refs[t] < ^uint8(0) {
		b.refs[t]++
	}
	if len(covered) > 1 {
		id := span{h, t}
		w.spanKeys += len(covered) - len(w.spans[id])
		w.spans[id] = append(w.spans[id][:0], covered...)
		b.spans |= 1 << t
	}
	return s, true
}

// tierOnly is the refs of a block held once, in tier t alone.
func tierOnly(t Tier) [NumTiers]uint8 {
	var r [NumTiers]uint8
	r[t] = 1
	return r
}

// rekey renames block s, held once in tier t alone, to engine hash h.
func (w *Worker) rekey(s uint32, h uint64, t Tier) {
	b := &w.blocks[s]
	delete(w.slots, b.hash)
	if b.spans&(1<<t) != 0 {
		old := span{b.hash, t}
		w.spans[span{h, t}] = w.spans[old]
		delete(w.spans, old)
	}
	b.hash = h
	w.slots[h] = s
}

// fit evicts tier t's least recently used blocks from the view until it
// is within capacity.
func (w *Worker) fit(t Tier) {
	limit := w.policy[t].CapacityTokens
	if limit <= 0 || t == GPU {
		return
	}
	for w.tokens[t] > limit {
		s := w.blocks[0].tl[t-1].prev
		if s == 0 {
			return
		}
		w.removeOp(s, t)
		w.dropTier(s, t)
		if w.blocks[s].refs == ([NumTiers]uint8{}) {
			w.release(s)
		}
		w.tv[t].Evicted++
	}
}

// removeOp queues the index removal of every copy block s holds in t.
func (w *Worker) removeOp(s uint32, t Tier) {
	b := &w.blocks[s]
	var keys []uint64
	for range b.refs[t] {
		if b.spans&(1<<t) != 0 {
			keys = append(keys, w.spans[span{b.hash, t}]...)
		} else {
			keys = append(keys, b.key)
		}
	}
	w.change.Ops = append(w.change.Ops, Op{Kind: OpRemove, Tier: t, Keys: keys})
}

// dropTier forgets every copy block s holds in tier t (the caller has
// told the index).
func (w *Worker) dropTier(s uint32, t Tier) {
	b := &w.blocks[s]
	if b.refs[t] == 0 {
		return
	}
	w.unlinkTier(s, t)
	if b.spans&(1<<t) != 0 {
		w.dropSpan(s, t)
	}
	b.refs[t] = 0
}

func (w *Worker) linkTier(s uint32, t Tier) {
	w.tokens[t] += int(w.blocks[s].size)
	w.held[t]++
	if w.policy[t].Events != EventsFull {
		w.byKey[tierKey{w.blocks[s].key, t}] = s
	}
	if t == GPU {
		return
	}
	head := w.blocks[0].tl[t-1].next
	w.blocks[s].tl[t-1] = link{prev: 0, next: head}
	w.blocks[head].tl[t-1].prev = s
	w.blocks[0].tl[t-1].next = s
}

func (w *Worker) unlinkTier(s uint32, t Tier) {
	w.tokens[t] -= int(w.blocks[s].size)
	w.held[t]--
	if k := (tierKey{w.blocks[s].key, t}); w.byKey[k] == s {
		delete(w.byKey, k)
	}
	if t == GPU {
		return
	}
	l := w.blocks[s].tl[t-1]
	w.blocks[l.prev].tl[t-1].next = l.next
	w.blocks[l.next].tl[t-1].prev = l.prev
	w.blocks[s].tl[t-1] = link{}
}

// touchTier marks block s most recently used in tier t.
func (w *Worker) touchTier(s uint32, t Tier) {
	w.touch(s)
	if t == GPU || w.blocks[0].tl[t-1].next == s {
		return
	}
	w.unlinkTier(s, t)
	w.linkTier(s, t)
}

// Tiers returns the worker's view of each tier as of its last committed
// batch. It is safe for concurrent use.
func (w *Worker) Tiers() [NumTiers]TierView {
	if v := w.view.Load(); v != nil {
		return *v
	}
	return [NumTiers]TierView{}
}

// Held returns the engine hashes (their 64-bit form, as the worker's
// events carry them) of the blocks the view holds in tier t: what an
// operator or a test compares with the worker's own cache. A block learned
// from routing that no event has named yet is listed under a key of the
// router's, which no worker hash matches.
func (w *Worker) Held(t Tier) []uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]uint64, 0, w.held[t])
	for h, s := range w.slots {
		if w.blocks[s].refs[t] > 0 {
			out = append(out, h)
		}
	}
	return out
}

// publishView snapshots the tiers' views for Tiers; on the feed goroutine.
func (w *Worker) publishView() {
	var out [NumTiers]TierView
	for t := range NumTiers {
		out[t] = w.tv[t]
		out[t].Source = w.policy[t].Events.String()
		out[t].Blocks = w.held[t]
		out[t].Tokens = w.tokens[t]
		out[t].CapacityTokens = w.policy[t].CapacityTokens
	}
	w.in.mu.Lock()
	out[CPU].DroppedNotes = w.in.dropped
	w.in.mu.Unlock()
	w.view.Store(&out)
}
