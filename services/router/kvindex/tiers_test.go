package kvindex

import (
	"testing"

	"github.com/warmpath/warmpath/libs/kvevents"
)

// cpuChunks returns the CPU BlockStored events of a prompt's whole 8-token
// chunks, as LMCache announces them (hashes base+1, base+2, ...), and the
// prompt's keys at the GPU block size, 4.
func cpuChunks(prompt []uint32, base uint64) (kvevents.BlockStored, []uint64) {
	n := len(prompt) / 8
	hashes := make([]uint64, n)
	for i := range hashes {
		hashes[i] = base + uint64(i) + 1
	}
	ev := stored(nil, hashes, prompt[:n*8], "CPU")
	ev.BlockSize = 8
	return ev, AppendKeys(nil, Seed("m", ""), prompt, 4)
}

// shadowWorker is a worker with 4-token GPU blocks and a CPU tier of
// capacityChunks 8-token chunks known as src says.
func shadowWorker(t *testing.T, src EventSource, capacityChunks int) (*Index, *Worker) {
	t.Helper()
	x := New(1 << 12)
	w := NewWorker(x, "w", "m", nil)
	w.SetTier(CPU, TierPolicy{Events: src, CapacityTokens: 8 * capacityChunks, ChunkTokens: 8})
	w.Apply(kvevents.Batch{Events: []kvevents.Event{stored(nil, []uint64{1}, seq(4, 9000), "GPU")}}) // teaches the block size
	return x, w
}

func local(x *Index, keys []uint64) int {
	m := x.Lookup(keys, []string{"w"}, nil)[0]
	return m.Local - m.GPU
}

func TestStoreOnlyTierBoundedByCapacity(t *testing.T) {
	x, w := shadowWorker(t, EventsStoreOnly, 2)
	a, ka := cpuChunks(seq(16, 100), 100) // 2 chunks
	b, kb := cpuChunks(seq(8, 200), 200)  // 1 chunk
	w.Apply(kvevents.Batch{Events: []kvevents.Event{a}})
	if got := local(x, ka); got != 4 {
		t.Fatalf("after a: %d CPU blocks of a, want 4", got)
	}
	// b needs room: a's first chunk (least recently stored) leaves the
	// view, which takes a's whole run with it.
	w.Apply(kvevents.Batch{Events: []kvevents.Event{b}})
	if got, want := local(x, ka), 0; got != want {
		t.Errorf("after b: a's CPU run %d blocks, want %d (its first chunk evicted)", got, want)
	}
	if got := local(x, kb); got != 2 {
		t.Errorf("after b: b's CPU run %d blocks, want 2", got)
	}
	v := w.Tiers()[CPU]
	if v.Tokens > v.CapacityTokens || v.Blocks != 2 || v.Evicted != 1 || v.Source != "events+shadow" {
		t.Errorf("CPU view %+v: want 2 blocks within 16 tokens, 1 evicted, source events+shadow", v)
	}
	if st := x.Stats().Blocks["w"][CPU]; st != 4 {
		t.Errorf("index holds %d CPU keys of w, want 4 (two chunks of two blocks)", st)
	}
	// A re-announced chunk is a touch, not a second copy: one eviction
	// takes it out of the index.
	w.Apply(kvevents.Batch{Events: []kvevents.Event{b}})
	c, kc := cpuChunks(seq(16, 300), 300)
	w.Apply(kvevents.Batch{Events: []kvevents.Event{c}})
	if got := local(x, kb); got != 0 {
		t.Errorf("b still credited (%d blocks) after being evicted once", got)
	}
	if got := local(x, kc); got != 4 {
		t.Errorf("c's CPU run %d blocks, want 4", got)
	}
}

func TestPrefilledTouchKeepsChunk(t *testing.T) {
	x, w := shadowWorker(t, EventsStoreOnly, 2)
	a, ka := cpuChunks(seq(8, 100), 100)
	b, kb := cpuChunks(seq(8, 200), 200)
	c, kc := cpuChunks(seq(8, 300), 300)
	w.Apply(kvevents.Batch{Events: []kvevents.Event{a, b}})
	w.Prefilled(ka) // a served from L1: most recently used, so b goes first
	w.Apply(kvevents.Batch{Events: []kvevents.Event{c}})
	if local(x, ka) != 2 || local(x, kb) != 0 || local(x, kc) != 2 {
		t.Fatalf("after routing a and storing c: a %d, b %d, c %d CPU blocks; want 2, 0, 2", local(x, ka), local(x, kb), local(x, kc))
	}
}

func TestNoEventsTierLearnsFromRouting(t *testing.T) {
	x, w := shadowWorker(t, EventsNone, 2)
	ka := AppendKeys(nil, Seed("m", ""), seq(20, 100), 4) // 2 whole chunks and a part
	kb := AppendKeys(nil, Seed("m", ""), seq(8, 200), 4)
	w.Prefilled(ka)
	w.Apply(kvevents.Batch{}) // the notes are applied with the next batch
	if got := local(x, ka); got != 4 {
		t.Fatalf("learned %d CPU blocks of a, want its 2 whole chunks (4 blocks)", got)
	}
	w.Prefilled(ka) // again: a touch, nothing new
	w.Prefilled(kb)
	w.Apply(kvevents.Batch{})
	if local(x, kb) != 2 || local(x, ka) != 0 {
		t.Errorf("after b: a %d, b %d CPU blocks; want a's first chunk evicted (0) and b learned (2)", local(x, ka), local(x, kb))
	}
	v := w.Tiers()[CPU]
	if v.Source != "routing" || v.Learned != 3 || v.Blocks != 2 || v.Tokens != 16 {
		t.Errorf("CPU view %+v: want source routing, 3 learned, 2 blocks, 16 tokens", v)
	}
	// CPU events, if a newer LMCache sends them after all, are applied.
	ev, kc := cpuChunks(seq(8, 300), 300)
	w.Apply(kvevents.Batch{Events: []kvevents.Event{ev}})
	if local(x, kc) != 2 {
		t.Error("a CPU store was not applied to a tier learned from routing")
	}
}

func TestFullTierFollowsRemovals(t *testing.T) {
	x, w := shadowWorker(t, EventsFull, 0)
	a, ka := cpuChunks(seq(16, 100), 100)
	w.Apply(kvevents.Batch{Events: []kvevents.Event{a, a}}) // stored twice: two copies
	w.Apply(kvevents.Batch{Events: []kvevents.Event{removed([]uint64{101, 102}, "CPU")}})
	if got := local(x, ka); got != 4 {
		t.Fatalf("one removal of a twice-stored chunk left %d blocks, want 4", got)
	}
	w.Apply(kvevents.Batch{Events: []kvevents.Event{removed([]uint64{101, 102}, "CPU")}})
	if got := local(x, ka); got != 0 {
		t.Fatalf("after both removals %d blocks left", got)
	}
	if v := w.Tiers()[CPU]; v.Blocks != 0 || v.Tokens != 0 || v.Source != "events" {
		t.Errorf("CPU view %+v after every removal", v)
	}
}

func TestPrefillInboxBounded(t *testing.T) {
	_, w := shadowWorker(t, EventsStoreOnly, 2)
	keys := make([]uint64, maxInbox/2+1)
	w.Prefilled(keys)
	w.Prefilled(keys) // over the bound: dropped, counted
	if w.in.dropped != 1 || w.in.keys != len(keys) {
		t.Fatalf("inbox holds %d keys, dropped %d; want %d and 1", w.in.keys, w.in.dropped, len(keys))
	}
}

func TestParseEventSource(t *testing.T) {
	for in, want := range map[string]EventSource{"full": EventsFull, "store-only": EventsStoreOnly, "none": EventsNone} {
		if got, err := ParseEventSource(in); err != nil || got != want {
			t.Errorf("ParseEventSource(%q) = %v, %v", in, got, err)
		}
	}
	if _, err := ParseEventSource("stores"); err == nil {
		t.Error("ParseEventSource accepted an unknown mode")
	}
}

// TestFullTierCapacityWaitsForTheBatch: a tier that reports removals
// announces a store before the eviction it caused, in the same batch; the
// view must not evict by its own (different) order in between, or it
// drops a chunk the worker still holds.
func TestFullTierCapacityWaitsForTheBatch(t *testing.T) {
	x, w := shadowWorker(t, EventsFull, 2)
	a, ka := cpuChunks(seq(8, 100), 100)
	b, kb := cpuChunks(seq(8, 200), 200)
	c, kc := cpuChunks(seq(8, 300), 300)
	w.Apply(kvevents.Batch{Events: []kvevents.Event{a, b}})
	w.Prefilled(ka) // the view now takes b for the least recently used...
	// ...but the worker evicted a, and says so after storing c.
	w.Apply(kvevents.Batch{Events: []kvevents.Event{c, removed([]uint64{101}, "CPU")}})
	if local(x, ka) != 0 || local(x, kb) != 2 || local(x, kc) != 2 {
		t.Fatalf("a %d, b %d, c %d CPU blocks; want the worker's own set: b and c", local(x, ka), local(x, kb), local(x, kc))
	}
	if v := w.Tiers()[CPU]; v.Evicted != 0 {
		t.Errorf("the view evicted %d blocks itself; the batch's removal sufficed", v.Evicted)
	}
}

// TestStoreOnlyLearnsPrefilledChunks: LMCache stores every whole chunk it
// prefilled and never re-announces one it holds, so a prompt whose prefill
// ended puts its chunks back into a store-only view that had evicted them;
// when the worker's store event names a learned chunk, the view takes the
// worker's hash for it, without a second copy.
func TestStoreOnlyLearnsPrefilledChunks(t *testing.T) {
	x, w := shadowWorker(t, EventsStoreOnly, 2)
	ka := AppendKeys(nil, Seed("m", ""), seq(8, 100), 4)
	w.Prefilled(ka) // prefill ended before the store event arrived
	w.Apply(kvevents.Batch{})
	if got := local(x, ka); got != 2 {
		t.Fatalf("a prefilled chunk not in the view: %d CPU blocks", got)
	}
	a, _ := cpuChunks(seq(8, 100), 100) // its store event, hash 101
	w.Apply(kvevents.Batch{Events: []kvevents.Event{a}})
	if v := w.Tiers()[CPU]; v.Blocks != 1 || local(x, ka) != 2 {
		t.Fatalf("after the store event: view %+v, %d CPU blocks; want one chunk", v, local(x, ka))
	}
	if held := w.Held(CPU); len(held) != 1 || held[0] != 101 {
		t.Fatalf("held %v, want the worker's hash 101", held)
	}
	if st := x.Stats().Blocks["w"][CPU]; st != 2 {
		t.Fatalf("index holds %d CPU keys, want 2 (one copy)", st)
	}
}
