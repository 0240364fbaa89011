package kvindex

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/warmpath/warmpath/libs/kvevents"
)

func seq(n int, from uint32) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = from + uint32(i)
	}
	return out
}

func TestAppendKeys(t *testing.T) {
	s := Seed("m", "")
	a := AppendKeys(nil, s, seq(40, 0), 16)
	if len(a) != 2 {
		t.Fatalf("%d keys for 40 tokens in blocks of 16, want 2 (the partial block has none)", len(a))
	}
	b := AppendKeys(nil, s, seq(32, 0), 16)
	if a[0] != b[0] || a[1] != b[1] {
		t.Fatal("keys differ for equal token prefixes")
	}
	// Chaining: the second block's key from its parent equals the second
	// key of the whole sequence.
	if c := AppendKeys(nil, a[0], seq(16, 16), 16); c[0] != a[1] {
		t.Fatal("chaining from the parent key gives a different key")
	}
	if d := AppendKeys(nil, Seed("other", ""), seq(16, 0), 16); d[0] == a[0] {
		t.Fatal("different models share a key")
	}
	if e := AppendKeys(nil, Seed("m", "lora"), seq(16, 0), 16); e[0] == a[0] {
		t.Fatal("a LoRA adapter shares the base model's key")
	}
	if f := AppendKeys(nil, s, seq(16, 1), 16); f[0] == a[0] {
		t.Fatal("different tokens share a key")
	}
	if g := AppendKeys(nil, s, seq(300, 0), 100); len(g) != 3 {
		t.Fatalf("blocks larger than the stack buffer: %d keys", len(g))
	}
}

func TestTierOf(t *testing.T) {
	for medium, want := range map[string]Tier{"": GPU, "GPU": GPU, "gpu": GPU, "CPU": CPU, "cpu_pinned": CPU, "LOCAL_CPU": CPU, "DISK": L2, "REMOTE": L2} {
		if got := TierOf(medium); got != want {
			t.Errorf("TierOf(%q) = %v, want %v", medium, got, want)
		}
	}
}

func TestLookup(t *testing.T) {
	keys := []uint64{1, 2, 3, 4, 5}
	tests := []struct {
		name  string
		setup func(x *Index)
		want  map[string]Match
	}{
		{"empty index", func(*Index) {}, map[string]Match{"a": {}, "b": {}}},
		{"gpu prefix", func(x *Index) { x.Add("a", GPU, keys[:3]) }, map[string]Match{"a": {3, 3, 3}, "b": {}}},
		{"a hole ends the run", func(x *Index) { x.Add("a", GPU, []uint64{1, 2, 4, 5}) }, map[string]Match{"a": {2, 2, 2}}},
		{"cpu extends local, not gpu", func(x *Index) {
			x.Add("a", GPU, keys[:2])
			x.Add("a", CPU, keys[2:4])
		}, map[string]Match{"a": {2, 4, 4}}},
		{"l2 counts for everyone", func(x *Index) {
			x.Add("a", GPU, keys[:1])
			x.Add("cache", L2, keys[:4])
		}, map[string]Match{"a": {1, 1, 4}, "b": {0, 0, 4}}},
		{"unknown worker", func(x *Index) { x.Add("a", GPU, keys) }, map[string]Match{"a": {5, 5, 5}, "zz": {}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x := New(100)
			tt.setup(x)
			var names []string
			for n := range tt.want {
				names = append(names, n)
			}
			got := x.Lookup(keys, names, nil)
			for i, n := range names {
				if got[i] != tt.want[n] {
					t.Errorf("%s: %+v, want %+v", n, got[i], tt.want[n])
				}
			}
		})
	}
}

func TestRefCounts(t *testing.T) {
	x := New(100)
	x.Add("a", GPU, []uint64{7})
	x.Add("a", GPU, []uint64{7})
	x.Remove("a", GPU, []uint64{7})
	if m := x.Lookup([]uint64{7}, []string{"a"}, nil); m[0].GPU != 1 {
		t.Fatal("a block stored twice left after one removal")
	}
	x.Remove("a", GPU, []uint64{7})
	if m := x.Lookup([]uint64{7}, []string{"a"}, nil); m[0].GPU != 0 {
		t.Fatal("block still indexed after its last removal")
	}
	if st := x.Stats(); st.Keys != 0 || st.Blocks["a"][GPU] != 0 {
		t.Fatalf("stats after removals: %+v", st)
	}
	x.Remove("a", CPU, []uint64{7, 8}) // never stored: ignored
	x.Remove("nobody", GPU, []uint64{7})
}

func TestBoundedByLRU(t *testing.T) {
	x := New(3)
	x.Add("a", GPU, []uint64{1, 2, 3})
	x.Add("a", GPU, []uint64{1}) // 1 is now the most recent
	x.Add("b", GPU, []uint64{4})
	st := x.Stats()
	if st.Keys != 3 || st.Evicted != 1 {
		t.Fatalf("keys %d evicted %d, want 3 and 1", st.Keys, st.Evicted)
	}
	got := x.Lookup([]uint64{2}, []string{"a"}, nil)
	if got[0].GPU != 0 {
		t.Fatal("the least recently stored key survived")
	}
	if got := x.Lookup([]uint64{1}, []string{"a"}, nil); got[0].GPU != 1 {
		t.Fatal("a recently stored key was evicted")
	}
	if st.Blocks["a"][GPU] != 2 || st.Blocks["b"][GPU] != 1 {
		t.Fatalf("per-worker counts after eviction: %+v", st.Blocks)
	}
}

func TestClear(t *testing.T) {
	x := New(100)
	x.Add("a", GPU, []uint64{1, 2})
	x.Add("a", CPU, []uint64{1, 2})
	x.Add("b", GPU, []uint64{1})
	x.Clear("a", GPU)
	got := x.Lookup([]uint64{1, 2}, []string{"a", "b"}, nil)
	if got[0] != (Match{0, 2, 2}) || got[1] != (Match{1, 1, 1}) {
		t.Fatalf("after clearing a's GPU: %+v", got)
	}
	x.Clear("a")
	if st := x.Stats(); st.Keys != 1 || len(st.Blocks) != 1 {
		t.Fatalf("after clearing a entirely: %+v", st)
	}
	// The freed worker id is reused without inheriting anything.
	x.Add("c", GPU, []uint64{9})
	if got := x.Lookup([]uint64{1}, []string{"c"}, nil); got[0] != (Match{}) {
		t.Fatal("a new worker inherited a cleared worker's blocks")
	}
}

func stored(parent *uint64, hashes []uint64, tokens []uint32, medium string) kvevents.BlockStored {
	ev := kvevents.BlockStored{TokenIDs: tokens, BlockSize: 4, Medium: medium}
	for _, h := range hashes {
		ev.BlockHashes = append(ev.BlockHashes, kvevents.IntHash(h))
	}
	if parent != nil {
		p := kvevents.IntHash(*parent)
		ev.ParentBlockHash = &p
	}
	return ev
}

func removed(hashes []uint64, medium string) kvevents.BlockRemoved {
	ev := kvevents.BlockRemoved{Medium: medium}
	for _, h := range hashes {
		ev.BlockHashes = append(ev.BlockHashes, kvevents.IntHash(h))
	}
	return ev
}

func ptr(v uint64) *uint64 { return &v }

func TestWorkerApply(t *testing.T) {
	x := New(1000)
	w := NewWorker(x, "w", "m", nil)
	prompt := seq(12, 100)
	keys := AppendKeys(nil, Seed("m", ""), prompt, 4)
	match := func() Match { return x.Lookup(keys, []string{"w"}, nil)[0] }

	// Two events chained by the parent hash index the whole prompt.
	w.Apply(kvevents.Batch{Events: []kvevents.Event{
		stored(nil, []uint64{11, 12}, prompt[:8], "GPU"),
		stored(ptr(12), []uint64{13}, prompt[8:], "GPU"),
	}})
	if m := match(); m.GPU != 3 {
		t.Fatalf("after stores: %+v, want 3 GPU blocks", m)
	}
	// The same blocks offloaded to CPU, then evicted from GPU.
	w.Apply(kvevents.Batch{Events: []kvevents.Event{
		stored(nil, []uint64{11, 12}, prompt[:8], "CPU"),
		removed([]uint64{12, 13}, "GPU"),
	}})
	if m := match(); m != (Match{1, 2, 2}) {
		t.Fatalf("after offload and eviction: %+v", m)
	}
	// A block whose parent was never seen is not guessed.
	w.Apply(kvevents.Batch{Events: []kvevents.Event{stored(ptr(999), []uint64{21}, seq(4, 0), "GPU")}})
	if w.stats.UnknownParent.Load() != 1 {
		t.Fatal("unknown parent not counted")
	}
	// Malformed: token count not blocks × block size.
	w.Apply(kvevents.Batch{Events: []kvevents.Event{stored(nil, []uint64{31}, seq(3, 0), "GPU")}})
	if w.stats.Invalid.Load() != 1 {
		t.Fatal("invalid event not counted")
	}
	w.Apply(kvevents.Batch{Events: []kvevents.Event{kvevents.AllBlocksCleared{}}})
	if m := match(); m != (Match{0, 2, 2}) {
		t.Fatalf("after AllBlocksCleared (GPU only): %+v", m)
	}
	w.Reset()
	w.Apply(kvevents.Batch{}) // the sink drops the worker with the next batch
	if m := match(); m != (Match{}) {
		t.Fatalf("after reset: %+v", m)
	}
}

// replayer serves a fixed buffer of batches, as a worker's replay socket.
type replayer struct {
	buf   []kvevents.Message
	calls []uint64
	err   error
}

func (r *replayer) Replay(_ context.Context, from uint64) ([]kvevents.Message, error) {
	r.calls = append(r.calls, from)
	var out []kvevents.Message
	for _, m := range r.buf {
		if m.Seq >= from {
			out = append(out, m)
		}
	}
	return out, r.err
}

func message(t *testing.T, s uint64, evs ...kvevents.Event) kvevents.Message {
	t.Helper()
	p, err := kvevents.EncodeBatch(kvevents.Batch{Events: evs}, kvevents.MapEncoding)
	if err != nil {
		t.Fatal(err)
	}
	return kvevents.Message{Topic: "kv", Seq: s, Payload: p}
}

func TestFeedSequencing(t *testing.T) {
	prompt := seq(8, 0)
	keys := AppendKeys(nil, Seed("m", ""), prompt, 4)
	m0 := func(t *testing.T) kvevents.Message { return message(t, 0, stored(nil, []uint64{1}, prompt[:4], "GPU")) }
	m1 := func(t *testing.T) kvevents.Message {
		return message(t, 1, stored(ptr(1), []uint64{2}, prompt[4:], "GPU"))
	}
	m2 := func(t *testing.T) kvevents.Message { return message(t, 2, removed([]uint64{2}, "GPU")) }

	t.Run("late join replays from 0", func(t *testing.T) {
		x := New(100)
		r := &replayer{buf: []kvevents.Message{m0(t), m1(t)}}
		f := NewFeed(NewWorker(x, "w", "m", nil), r)
		if err := f.Handle(context.Background(), message(t, 2)); err != nil {
			t.Fatal(err)
		}
		if len(r.calls) != 1 || r.calls[0] != 0 {
			t.Fatalf("replay calls %v, want [0]", r.calls)
		}
		if got := x.Lookup(keys, []string{"w"}, nil)[0].GPU; got != 2 {
			t.Fatalf("%d blocks after replay, want 2", got)
		}
	})
	t.Run("gap repaired", func(t *testing.T) {
		x := New(100)
		r := &replayer{buf: []kvevents.Message{m0(t), m1(t), m2(t)}}
		w := NewWorker(x, "w", "m", nil)
		f := NewFeed(w, r)
		_ = f.Handle(context.Background(), m0(t))
		if err := f.Handle(context.Background(), m2(t)); err != nil {
			t.Fatal(err)
		}
		if w.stats.Gaps.Load() != 1 || w.stats.Replayed.Load() != 1 || w.stats.Lost.Load() != 0 {
			t.Fatalf("gaps %d replayed %d lost %d", w.stats.Gaps.Load(), w.stats.Replayed.Load(), w.stats.Lost.Load())
		}
		// m1 stored block 2 and m2 removed it: one block left.
		if got := x.Lookup(keys, []string{"w"}, nil)[0].GPU; got != 1 {
			t.Fatalf("%d blocks, want 1", got)
		}
	})
	t.Run("replay failure counts the loss", func(t *testing.T) {
		x := New(100)
		r := &replayer{err: errors.New("worker gone")}
		w := NewWorker(x, "w", "m", nil)
		f := NewFeed(w, r)
		_ = f.Handle(context.Background(), m0(t))
		if err := f.Handle(context.Background(), message(t, 5)); err == nil {
			t.Fatal("replay error not reported")
		}
		if w.stats.Lost.Load() != 4 || w.stats.ReplayErrors.Load() != 1 {
			t.Fatalf("lost %d replay errors %d", w.stats.Lost.Load(), w.stats.ReplayErrors.Load())
		}
	})
	t.Run("restart clears the worker", func(t *testing.T) {
		x := New(100)
		w := NewWorker(x, "w", "m", nil)
		f := NewFeed(w, nil)
		_ = f.Handle(context.Background(), m0(t))
		_ = f.Handle(context.Background(), m1(t))
		_ = f.Handle(context.Background(), message(t, 0))
		if w.stats.Restarts.Load() != 1 {
			t.Fatal("restart not detected")
		}
		if got := x.Lookup(keys, []string{"w"}, nil)[0]; got != (Match{}) {
			t.Fatalf("blocks survived a restart: %+v", got)
		}
	})
	t.Run("sync on subscribe, then live duplicates skipped", func(t *testing.T) {
		x := New(100)
		r := &replayer{buf: []kvevents.Message{m0(t), m1(t)}}
		w := NewWorker(x, "w", "m", nil)
		f := NewFeed(w, r)
		if err := f.Sync(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := x.Lookup(keys, []string{"w"}, nil)[0].GPU; got != 2 {
			t.Fatalf("%d blocks after sync, want 2", got)
		}
		// m1 also arrives live: a duplicate, not a restart.
		_ = f.Handle(context.Background(), m1(t))
		_ = f.Handle(context.Background(), m2(t))
		if w.stats.Restarts.Load() != 0 {
			t.Fatal("a live duplicate of a replayed batch was taken for a restart")
		}
		if got := x.Lookup(keys, []string{"w"}, nil)[0].GPU; got != 1 {
			t.Fatalf("%d blocks after m2, want 1", got)
		}
	})
	t.Run("reordered message is a duplicate, not a restart", func(t *testing.T) {
		// m2 overtakes m1 (a relay reordered them): the gap is filled from
		// replay, and m1 arriving late was applied already.
		x := New(100)
		r := &replayer{buf: []kvevents.Message{m0(t), m1(t), m2(t)}}
		w := NewWorker(x, "w", "m", nil)
		f := NewFeed(w, r)
		for _, m := range []kvevents.Message{m0(t), m2(t), m1(t)} {
			if err := f.Handle(context.Background(), m); err != nil {
				t.Fatal(err)
			}
		}
		if w.stats.Restarts.Load() != 0 || w.stats.Gaps.Load() != 1 || len(r.calls) != 1 {
			t.Fatalf("restarts %d gaps %d replays %v, want 0, 1 and one from 1", w.stats.Restarts.Load(), w.stats.Gaps.Load(), r.calls)
		}
		if got := x.Lookup(keys, []string{"w"}, nil)[0].GPU; got != 1 {
			t.Fatalf("%d blocks, want 1 (m1 stored block 2, m2 removed it)", got)
		}
	})
	t.Run("late seq with other content is a restart", func(t *testing.T) {
		// Inside the window a gap fill opened, but not the batch the
		// replay gave under that seq: a new process.
		x := New(100)
		r := &replayer{buf: []kvevents.Message{m0(t), m1(t), m2(t)}}
		w := NewWorker(x, "w", "m", nil)
		f := NewFeed(w, r)
		_ = f.Handle(context.Background(), m0(t))
		_ = f.Handle(context.Background(), m2(t))
		_ = f.Handle(context.Background(), message(t, 1, stored(nil, []uint64{7}, seq(4, 50), "GPU")))
		if w.stats.Restarts.Load() != 1 {
			t.Fatalf("restarts %d, want 1", w.stats.Restarts.Load())
		}
	})
	t.Run("restart found on reconnect", func(t *testing.T) {
		x := New(100)
		r := &replayer{buf: []kvevents.Message{m0(t), m1(t)}}
		w := NewWorker(x, "w", "m", nil)
		f := NewFeed(w, r)
		_ = f.Handle(context.Background(), m0(t))
		_ = f.Handle(context.Background(), m1(t))
		// A new process published different batches under the same seqs
		// while the subscriber was away.
		r.buf = []kvevents.Message{message(t, 0, stored(nil, []uint64{7}, seq(4, 50), "GPU")), message(t, 1)}
		if err := f.Sync(context.Background()); err != nil {
			t.Fatal(err)
		}
		if w.stats.Restarts.Load() != 1 {
			t.Fatal("restart not detected on reconnect")
		}
		if got := x.Lookup(keys, []string{"w"}, nil)[0]; got != (Match{}) {
			t.Fatalf("old process's blocks survived: %+v", got)
		}
		newKeys := AppendKeys(nil, Seed("m", ""), seq(4, 50), 4)
		if got := x.Lookup(newKeys, []string{"w"}, nil)[0].GPU; got != 1 {
			t.Fatal("new process's blocks not applied")
		}
	})
	t.Run("garbage payload counted", func(t *testing.T) {
		w := NewWorker(New(10), "w", "m", nil)
		f := NewFeed(w, nil)
		_ = f.Handle(context.Background(), kvevents.Message{Seq: 0, Payload: []byte{0xc1}})
		if w.stats.DecodeErrors.Load() != 1 {
			t.Fatal("decode error not counted")
		}
	})
}

// TestConcurrentLookups runs lookups while events apply (run with -race).
func TestConcurrentLookups(t *testing.T) {
	x := New(1 << 12)
	keys := AppendKeys(nil, Seed("m", ""), seq(64*16, 0), 16)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := string(rune('a' + w))
			for i := range 200 {
				x.Add(name, Tier(i%3), keys[:i%len(keys)])
				x.Remove(name, Tier(i%3), keys[:i%7])
			}
		}()
	}
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 500 {
				for _, m := range x.Lookup(keys, []string{"a", "b", "c", "d"}, nil) {
					if m.GPU > m.Local || m.Local > m.Any {
						t.Errorf("inconsistent match %+v", m)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
}

// LMCache offloads 256-token chunks while vLLM's GPU blocks hold 16: a
// chunk must be found by lookups at the GPU block size, and its eviction
// must take back every block it covered.
func TestWorkerApplyLargerOffloadBlocks(t *testing.T) {
	x := New(1000)
	w := NewWorker(x, "w", "m", nil)
	prompt := seq(16, 100)
	keys := AppendKeys(nil, Seed("m", ""), prompt, 4)
	match := func() Match { return x.Lookup(keys, []string{"w"}, nil)[0] }
	chunk := func(parent *uint64, hashes []uint64, tokens []uint32) kvevents.BlockStored {
		ev := stored(parent, hashes, tokens, "CPU")
		ev.BlockSize = 8
		return ev
	}

	w.Apply(kvevents.Batch{Events: []kvevents.Event{
		stored(nil, []uint64{1, 2}, prompt[:8], "GPU"), // teaches the worker's block size, 4
		chunk(nil, []uint64{101}, prompt[:8]),
		chunk(ptr(101), []uint64{102}, prompt[8:]),
		removed([]uint64{1, 2}, "GPU"),
	}})
	if m := match(); m != (Match{GPU: 0, Local: 4, Any: 4}) {
		t.Fatalf("two 8-token chunks over 4-token blocks: %+v, want all 4 blocks local", m)
	}
	w.Apply(kvevents.Batch{Events: []kvevents.Event{removed([]uint64{102}, "CPU")}})
	if m := match(); m != (Match{GPU: 0, Local: 2, Any: 2}) {
		t.Fatalf("after the second chunk's eviction: %+v, want the first chunk's 2 blocks", m)
	}
	if got := w.stats.Removed.Load(); got != 3 {
		t.Fatalf("removed %d blocks, want 3 (two GPU blocks, one chunk)", got)
	}
	w.Apply(kvevents.Batch{Events: []kvevents.Event{removed([]uint64{101}, "CPU")}})
	if m := match(); m != (Match{}) || len(w.spans) != 0 || len(w.slots) != 0 {
		t.Fatalf("after every eviction: %+v, %d spans, %d blocks left", m, len(w.spans), len(w.slots))
	}

	// A chunk size that is not a multiple of the GPU block keeps its own
	// keys: no lookup at the GPU block size can find it.
	odd := stored(nil, []uint64{201}, prompt[:6], "CPU")
	odd.BlockSize = 6
	w.Apply(kvevents.Batch{Events: []kvevents.Event{odd}})
	if m := match(); m != (Match{}) {
		t.Fatalf("a 6-token chunk over 4-token blocks matched: %+v", m)
	}
}

func TestHoldings(t *testing.T) {
	x := New(16)
	x.Add("a", GPU, []uint64{1, 2})
	x.Add("a", GPU, []uint64{2})
	x.Add("a", CPU, []uint64{2})
	x.Add("b", GPU, []uint64{3})
	got := map[Holding]bool{}
	for _, h := range x.Holdings("a") {
		got[h] = true
	}
	want := map[Holding]bool{{Key: 1, Tier: GPU, Copies: 1}: true, {Key: 2, Tier: GPU, Copies: 2}: true, {Key: 2, Tier: CPU, Copies: 1}: true}
	if len(got) != len(want) {
		t.Fatalf("holdings %v, want %v", got, want)
	}
	for h := range want {
		if !got[h] {
			t.Fatalf("holdings %v lack %v", got, h)
		}
	}
	if h := x.Holdings("nobody"); h != nil {
		t.Fatalf("unknown worker holds %v", h)
	}
}

// TestRootParentEncodedAsZero: a root block whose parent hash is sent as 0
// rather than nil is indexed as a root, as llm-d's indexer reads it; a
// worker that really holds a block hashing to 0 chains to that block.
func TestRootParentEncodedAsZero(t *testing.T) {
	x := New(1000)
	w := NewWorker(x, "w", "m", nil)
	prompt := seq(8, 100)
	keys := AppendKeys(nil, Seed("m", ""), prompt, 4)
	w.Apply(kvevents.Batch{Events: []kvevents.Event{
		stored(ptr(0), []uint64{11}, prompt[:4], "GPU"),
		stored(ptr(11), []uint64{12}, prompt[4:], "GPU"),
	}})
	if m := x.Lookup(keys, []string{"w"}, nil)[0]; m.GPU != 2 {
		t.Fatalf("match %+v, want 2 GPU blocks (rejections %d: %+v)", m, w.stats.Rejected(), w.stats.LastRejection())
	}
	if w.stats.Rejected() != 0 {
		t.Fatalf("%d events rejected", w.stats.Rejected())
	}
}

// TestRejectionRecorded: an event the index cannot take leaves its reason
// for operators, not only a counter.
func TestRejectionRecorded(t *testing.T) {
	tests := []struct {
		name   string
		ev     kvevents.Event
		reason string
	}{
		{"unknown parent", stored(ptr(999), []uint64{21}, seq(4, 0), "GPU"), "unknown_parent"},
		{"token count not blocks times block size", stored(nil, []uint64{31}, seq(3, 0), "GPU"), "invalid"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := NewWorker(New(100), "w", "m", nil)
			if w.stats.LastRejection() != nil {
				t.Fatal("a rejection before any event")
			}
			w.Apply(kvevents.Batch{Events: []kvevents.Event{tt.ev}})
			r := w.stats.LastRejection()
			if w.stats.Rejected() != 1 || r == nil || r.Reason != tt.reason || r.Detail == "" || r.At.IsZero() {
				t.Fatalf("rejected %d, last %+v; want 1 with reason %q and a detail", w.stats.Rejected(), r, tt.reason)
			}
		})
	}
}
