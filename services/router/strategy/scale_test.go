package strategy

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/warmpath/warmpath/libs/kvevents"
	"github.com/warmpath/warmpath/services/router/kvindex"
)

// Per-entry costs the bounds are stated in (docs/router.md, "Bounds"); the
// scale test checks the sum holds in practice.
const (
	indexKeyBytes    = 82  // kvindex.Index, per key
	workerBlockBytes = 72  // kvindex.Worker, per block or span key
	chunkBytes       = 100 // PrefixAware, per chunk hash
	predictionBytes  = 160 // KVAware, per predicted block key
)

// TestTenMillionPrompts sends 10 million unique prompts through
// prefixaware and kvaware, feeding the chosen worker's KV events (stores,
// offloads to CPU, and removals of which one in ten is lost) into the
// index, and checks that the live heap stays within the configured bounds
// plus a fixed overhead — it would grow without limit if any table were
// bounded by count of prompts rather than by configuration. It takes
// minutes, so it runs only with WARMPATH_LONG=1 (WARMPATH_LONG_PROMPTS
// overrides the count):
//
//	WARMPATH_LONG=1 go test -run TestTenMillionPrompts -v -timeout 30m ./strategy/
func TestTenMillionPrompts(t *testing.T) {
	if os.Getenv("WARMPATH_LONG") != "1" {
		t.Skip("long test: set WARMPATH_LONG=1")
	}
	prompts := 10_000_000
	if s := os.Getenv("WARMPATH_LONG_PROMPTS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatal(err)
		}
		prompts = n
	}
	const (
		nWorkers      = 8
		maxKeys       = 1 << 18 // below what the workers' bounds let through, so it is hit too
		maxWorkerBlk  = 1 << 16
		maxChunks     = 1 << 16
		maxPreds      = 1 << 16
		blockSize     = 16
		promptTokens  = 64 // 4 blocks
		promptBytes   = 512
		removalDelay  = 4096 // prompts between a store and its removal
		overheadBytes = 32 << 20
	)
	bound := int64(maxKeys*indexKeyBytes + nWorkers*maxWorkerBlk*workerBlockBytes +
		nWorkers*maxChunks*chunkBytes + maxPreds*predictionBytes)

	idx := kvindex.NewBounded(kvindex.Limits{MaxKeys: maxKeys, MaxWorkerBlocks: maxWorkerBlk})
	pa := NewPrefixAware(PrefixAwareConfig{MaxChunksPerEndpoint: maxChunks, FallbackCapacityTokens: 1 << 30}, LoadGuardConfig{Window: 1, Ratio: 0.2})
	kv := NewKVAware(KVAwareConfig{MaxPredictions: maxPreds, DefaultBlockSize: blockSize}, LoadGuardConfig{Window: 1, Ratio: 0.2}, idx, pa)
	eps := make([]Endpoint, nWorkers)
	feeds := make(map[string]*kvindex.Worker, nWorkers)
	for i := range eps {
		eps[i] = Endpoint{ID: fmt.Sprintf("http://w%d:8000", i), BlockSize: blockSize}
		feeds[eps[i].ID] = kvindex.NewWorker(ConfirmingSink{Sink: idx, Confirmer: kv.preds}, eps[i].ID, "m", nil)
	}
	type pending struct {
		worker string
		hash   uint64
		cpu    bool
	}
	ring := make([]pending, removalDelay)

	text := []byte(strings.Repeat("lorem ipsum dolor sit amet, ", promptBytes/28+1)[:promptBytes])
	tokens := make([]uint32, promptTokens)
	hashes := make([]kvevents.BlockHash, promptTokens/blockSize)
	rm := make([]kvevents.BlockHash, promptTokens/blockSize+1)
	var events [3]kvevents.Event

	var maxHeap, maxRSS int64
	measure := func(done int) {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		heap, rss := int64(ms.HeapAlloc), rssBytes(t)
		maxHeap, maxRSS = max(maxHeap, heap), max(maxRSS, rss)
		t.Logf("%9d prompts: live heap %4d MiB, RSS %4d MiB (bound %d MiB + overhead %d MiB); index %d keys",
			done, heap>>20, rss>>20, bound>>20, overheadBytes>>20, idx.Stats().Keys)
		if heap > bound+overheadBytes {
			t.Fatalf("after %d prompts the live heap is %d MiB, over the bound %d MiB + %d MiB overhead", done, heap>>20, bound>>20, overheadBytes>>20)
		}
	}
	start := time.Now()
	for i := range prompts {
		// A unique prompt: its number leads both the text and the tokens,
		// so no chunk or block is shared with another prompt.
		binary.LittleEndian.PutUint64(text, uint64(i))
		for j := range tokens {
			tokens[j] = uint32(i)*promptTokens + uint32(j)
		}
		if _, err := pa.Pick(&Request{Model: "m", Prompt: string(text)}, eps); err != nil {
			t.Fatal(err)
		}
		d, err := kv.Pick(&Request{Model: "m", TokenIDs: tokens}, eps)
		if err != nil {
			t.Fatal(err)
		}
		// The chosen worker stores the prompt's blocks, and one prompt in
		// four is offloaded to CPU as one 64-token chunk.
		base := uint64(i) * 8
		for j := range hashes {
			hashes[j] = kvevents.IntHash(base + uint64(j) + 1)
		}
		evs := events[:0]
		evs = append(evs, kvevents.BlockStored{BlockHashes: hashes, TokenIDs: tokens, BlockSize: blockSize, Medium: "GPU"})
		cpu := i%4 == 0
		if cpu {
			evs = append(evs, kvevents.BlockStored{BlockHashes: []kvevents.BlockHash{kvevents.IntHash(base + 7)}, TokenIDs: tokens, BlockSize: promptTokens, Medium: "CPU"})
		}
		feeds[d.Endpoint].Apply(kvevents.Batch{Events: evs})
		// The prompt stored removalDelay earlier is evicted from its
		// worker; one removal in ten is lost.
		old := &ring[i%removalDelay]
		if old.worker != "" && i%10 != 0 {
			gpu, chunk := rm[:len(hashes)], rm[len(hashes):]
			for j := range gpu {
				gpu[j] = kvevents.IntHash(old.hash + uint64(j) + 1)
			}
			chunk[0] = kvevents.IntHash(old.hash + 7)
			evs = append(events[:0], kvevents.BlockRemoved{BlockHashes: gpu, Medium: "GPU"})
			if old.cpu {
				evs = append(evs, kvevents.BlockRemoved{BlockHashes: chunk, Medium: "CPU"})
			}
			feeds[old.worker].Apply(kvevents.Batch{Events: evs})
		}
		*old = pending{worker: d.Endpoint, hash: base, cpu: cpu}
		if (i+1)%1_000_000 == 0 || i+1 == prompts {
			measure(i + 1)
		}
	}
	held, forgotten := 0, uint64(0)
	for _, w := range feeds {
		if w.Size() > maxWorkerBlk {
			t.Errorf("a worker holds %d blocks, over %d", w.Size(), maxWorkerBlk)
		}
		held += w.Size()
		forgotten += w.Stats().Forgotten.Load()
	}
	st := idx.Stats()
	if st.Keys > maxKeys || prompts >= 1_000_000 && (st.Evicted == 0 || forgotten == 0) {
		t.Errorf("index %d keys of %d, %d evicted; %d worker blocks forgotten: a bound was not reached", st.Keys, maxKeys, st.Evicted, forgotten)
	}
	debug.FreeOSMemory()
	defer runtime.KeepAlive(feeds)
	defer runtime.KeepAlive(kv)
	t.Logf("%d prompts in %v: peak live heap %d MiB, peak RSS after GC %d MiB, RSS after FreeOSMemory %d MiB; bound %d MiB + overhead %d MiB; workers hold %d blocks (%d forgotten); index %d keys (%d evicted)",
		prompts, time.Since(start).Round(time.Second), maxHeap>>20, maxRSS>>20, rssBytes(t)>>20, bound>>20, overheadBytes>>20, held, forgotten, st.Keys, st.Evicted)
}

// rssBytes is the process's resident set (VmRSS), 0 where /proc is absent.
func rssBytes(t *testing.T) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	return 0
}
