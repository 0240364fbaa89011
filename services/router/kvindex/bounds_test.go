package kvindex

import (
	"testing"

	"github.com/warmpath/warmpath/libs/kvevents"
)

// TestWorkerBoundedWithLostRemovals: a worker stores 5000 prompts (two GPU
// blocks and one CPU chunk spanning them each) whose removals are all lost.
// Its event state — blocks and span keys — stays within MaxWorkerBlocks,
// the forgotten blocks leave the index too (their holders do not linger on
// keys other workers keep fresh), and the most recent prompts still match.
// Unbounded, the worker kept 10000 blocks and 5000 spans.
func TestWorkerBoundedWithLostRemovals(t *testing.T) {
	const maxWorker = 100
	x := NewBounded(Limits{MaxKeys: 1 << 20, MaxWorkerBlocks: maxWorker})
	w := NewWorker(x, "w", "m", nil)
	other := NewWorker(x, "other", "m", nil)
	var first []uint64
	for i := range 5000 {
		prompt := seq(8, uint32(i*8))
		h := uint64(3 * i)
		w.Apply(kvevents.Batch{Events: []kvevents.Event{
			stored(nil, []uint64{h + 1, h + 2}, prompt, "GPU"),
			chunkEvent(h+3, prompt), // 8 tokens over 4-token blocks: 2 span keys
		}})
		if i == 0 {
			first = AppendKeys(nil, Seed("m", ""), prompt, 4)
		}
		// Another worker keeps the first prompt's keys the most recently
		// stored, so the index's own LRU never drops them.
		other.Apply(kvevents.Batch{Events: []kvevents.Event{stored(nil, []uint64{1, 2}, seq(8, 0), "GPU")}})
		if got := w.Size(); got > maxWorker {
			t.Fatalf("after %d prompts the worker holds %d blocks and span keys (%d blocks, %d spans), over its bound %d", i+1, got, len(w.slots), len(w.spans), maxWorker)
		}
	}
	if len(w.spans) == 0 || w.spanKeys != 2*len(w.spans) {
		t.Fatalf("%d spans holding %d keys: spans are not accounted", len(w.spans), w.spanKeys)
	}
	if w.Stats().Forgotten.Load() == 0 {
		t.Fatal("nothing counted as forgotten")
	}
	if m := x.Lookup(first, []string{"w", "other"}, nil); m[0] != (Match{}) || m[1].GPU != 2 {
		t.Fatalf("first prompt: %+v; want the forgotten worker to hold nothing and the other both blocks", m)
	}
	if got := x.Stats().Blocks["w"]; got[GPU]+got[CPU]+got[L2] > maxWorker {
		t.Fatalf("the index credits the worker with %v blocks, more than it remembers", got)
	}
	last := AppendKeys(nil, Seed("m", ""), seq(8, 4999*8), 4)
	if m := x.Lookup(last, []string{"w"}, nil)[0]; m != (Match{GPU: 2, Local: 2, Any: 2}) {
		t.Fatalf("most recent prompt: %+v, want both blocks on GPU", m)
	}
	// A late removal of a forgotten block is ignored; one of a remembered
	// block still applies.
	w.Apply(kvevents.Batch{Events: []kvevents.Event{removed([]uint64{1, 2, 3}, "GPU"), removed([]uint64{3*4999 + 1, 3*4999 + 2}, "GPU")}})
	if m := x.Lookup(last, []string{"w"}, nil)[0]; m != (Match{GPU: 0, Local: 2, Any: 2}) {
		t.Fatalf("after removing the last prompt's GPU blocks: %+v, want its CPU chunk", m)
	}
}

// TestWorkerBoundKeepsParentsInUse: a parent block a new store builds on
// counts as used, so a long conversation's root is not forgotten while its
// turns keep arriving (its children would be rejected as unknown-parent).
func TestWorkerBoundKeepsParentsInUse(t *testing.T) {
	x := NewBounded(Limits{MaxKeys: 1 << 20, MaxWorkerBlocks: 4})
	w := NewWorker(x, "w", "m", nil)
	w.Apply(kvevents.Batch{Events: []kvevents.Event{stored(nil, []uint64{1}, seq(4, 0), "GPU")}})
	for i := range 20 {
		// A one-block prompt of its own, then a turn built on block 1.
		w.Apply(kvevents.Batch{Events: []kvevents.Event{
			stored(nil, []uint64{uint64(1000 + i)}, seq(4, uint32(1000+4*i)), "GPU"),
			stored(ptr(1), []uint64{uint64(2000 + i)}, seq(4, uint32(5000+4*i)), "GPU"),
		}})
	}
	if got := w.Stats().UnknownParent.Load(); got != 0 {
		t.Fatalf("%d turns rejected: the root in use was forgotten", got)
	}
	if w.Size() > 4 {
		t.Fatalf("worker holds %d blocks, over 4", w.Size())
	}
}

// TestWorkerBoundFromIndex: the per-worker bound comes from the sink, is
// never above the index's own key bound, and defaults otherwise.
func TestWorkerBoundFromIndex(t *testing.T) {
	for _, c := range []struct {
		sink Sink
		want int
	}{
		{NewBounded(Limits{MaxKeys: 1 << 22, MaxWorkerBlocks: 77}), 77},
		{New(1 << 22), DefaultMaxWorkerBlocks},
		{New(10), 10},
		{sinkFunc(func(*Change) error { return nil }), DefaultMaxWorkerBlocks},
	} {
		if got := NewWorker(c.sink, "w", "m", nil).max; got != c.want {
			t.Errorf("%T: worker bound %d, want %d", c.sink, got, c.want)
		}
	}
}

type sinkFunc func(*Change) error

func (f sinkFunc) Commit(c *Change) error { return f(c) }

func chunkEvent(hash uint64, tokens []uint32) kvevents.BlockStored {
	ev := stored(nil, []uint64{hash}, tokens, "CPU")
	ev.BlockSize = len(tokens)
	return ev
}
