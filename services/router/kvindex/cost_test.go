package kvindex

import (
	"runtime"
	"testing"

	"github.com/warmpath/warmpath/libs/kvevents"
)

func heapNow() int64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// TestWorkerBlockCost: a worker's event state costs at most the 92 bytes
// a block docs/router.md ("Bounds") states, at its bound (the CPU and L2
// tiers' LRU links, for capacity-bounded views, took it from 72).
func TestWorkerBlockCost(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates")
	}
	const n = 1 << 17
	sink := sinkFunc(func(*Change) error { return nil })
	before := heapNow()
	w := NewWorker(sink, "w", "m", nil)
	w.max = n
	tokens := make([]uint32, 64)
	hs := make([]kvevents.BlockHash, 4)
	for i := range n { // 4 blocks a prompt, the bound reached 4 times over
		for j := range tokens {
			tokens[j] = uint32(i*64 + j)
		}
		for j := range hs {
			hs[j] = kvevents.IntHash(uint64(i*4 + j + 1))
		}
		w.Apply(kvevents.Batch{Events: []kvevents.Event{kvevents.BlockStored{BlockHashes: hs, TokenIDs: tokens, BlockSize: 16}}})
	}
	per := float64(heapNow()-before) / float64(w.Size())
	t.Logf("%d blocks: %.1f bytes a block", w.Size(), per)
	if w.Size() != n || per > 92 {
		t.Fatalf("%d blocks at %.1f bytes each; want %d at most 92", w.Size(), per, n)
	}
	runtime.KeepAlive(w)
}
