// Package indexbench measures the kvaware index (services/router/kvindex,
// make bench-index): ingest rate on one core, lookup latency for an
// 8K-token prompt against an index of 1M blocks across 16 workers, and
// memory per block entry, next to a plain Go map doing the same inserts
// (the ceiling of any hash index here). See docs/benchmarks.md.
package indexbench

import (
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"time"

	"github.com/warmpath/warmpath/services/router/kvindex"
)

// Config is one run.
type Config struct {
	Blocks  int // blocks in the index
	Workers int // workers holding them
	// PromptBlocks is the blocks of each stored and looked-up prompt.
	PromptBlocks int
	Lookups      int // lookups measured
}

// Report is what a run writes to bench/results/kv_index.json; the keys
// are the issue's.
type Report struct {
	IngestBlocksPerSec   float64 `json:"ingest_blocks_per_sec"`
	MapInsertsPerSec     float64 `json:"go_map_inserts_per_sec"`
	IngestVsMap          float64 `json:"ingest_vs_go_map"`
	LookupP50us          float64 `json:"lookup_p50_us"`
	LookupP99us          float64 `json:"lookup_p99_us"`
	ScatteredP50us       float64 `json:"lookup_scattered_p50_us"`
	ScatteredP99us       float64 `json:"lookup_scattered_p99_us"`
	BytesPerBlockEntry   float64 `json:"bytes_per_block_entry"`
	MapBytesPerEntry     float64 `json:"go_map_bytes_per_entry"`
	Blocks               int     `json:"blocks"`
	Workers              int     `json:"workers"`
	PromptBlocks         int     `json:"prompt_blocks"`
	Lookups              int     `json:"lookups"`
	GOMAXPROCS           int     `json:"gomaxprocs"`
	GoVersion            string  `json:"go_version"`
	Timestamp            string  `json:"timestamp"`
	IngestGoalMet        bool    `json:"ingest_goal_met"`
	LookupGoalMet        bool    `json:"lookup_goal_met"`
	BytesPerEntryGoalMet bool    `json:"bytes_per_entry_goal_met"`
}

// heap is the live heap, after collections that leave only what is
// reachable.
func heap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// Run measures the index as cfg says. It runs on one core, as the goal
// says, setting GOMAXPROCS to 1 until it returns.
func Run(cfg Config) *Report {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	nBlocks, nWorkers, promptBlocks, nLookups := cfg.Blocks, cfg.Workers, cfg.PromptBlocks, cfg.Lookups
	rng := rand.New(rand.NewPCG(1, 2))
	names := make([]string, nWorkers)
	for i := range names {
		names[i] = "http://10.0.0." + strconv.Itoa(i+1) + ":8000"
	}
	// Prompts of promptBlocks blocks; each worker stores a share of them,
	// so keys are chains like real prompts'. Batches of 16 blocks, as one
	// engine step stores.
	keys := make([][]uint64, 0, nBlocks/promptBlocks+1)
	for total := 0; total < nBlocks; total += promptBlocks {
		toks := make([]uint32, promptBlocks*16)
		for i := range toks {
			toks[i] = rng.Uint32N(128000)
		}
		keys = append(keys, kvindex.AppendKeys(nil, kvindex.Seed("m", ""), toks, 16))
	}

	before := heap()
	idx := kvindex.New(nBlocks + 1)
	start := time.Now()
	stored := 0
	for i, ks := range keys {
		w := names[i%nWorkers]
		for j := 0; j < len(ks); j += 16 {
			idx.Add(w, kvindex.GPU, ks[j:min(j+16, len(ks))])
		}
		stored += len(ks)
	}
	ingest := float64(stored) / time.Since(start).Seconds()
	bytesPer := float64(heap()-before) / float64(stored)

	beforeMap := heap()
	m := make(map[uint64]uint64)
	start = time.Now()
	for _, ks := range keys {
		for _, k := range ks {
			m[k] = k
		}
	}
	mapRate := float64(len(m)) / time.Since(start).Seconds()
	mapBytes := float64(heap()-beforeMap) / float64(len(m))
	clear(m)

	lat := measure(idx, keys, names, nLookups, rng)

	// The same blocks stored one by one in random order: no two blocks of
	// a prompt sit side by side, so every block costs a map probe. Events
	// arrive in chain order, so this is the worst case, not the usual one.
	type placed struct {
		w string
		k uint64
	}
	var all []placed
	for i, ks := range keys {
		for _, k := range ks {
			all = append(all, placed{names[i%nWorkers], k})
		}
	}
	rng.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	idx = kvindex.New(nBlocks + 1)
	for _, s := range all {
		idx.Add(s.w, kvindex.GPU, []uint64{s.k})
	}
	all = nil
	scattered := measure(idx, keys, names, nLookups, rng)
	r := &Report{
		IngestBlocksPerSec: round(ingest), MapInsertsPerSec: round(mapRate), IngestVsMap: round3(ingest / mapRate),
		LookupP50us: round3(lat[len(lat)/2]), LookupP99us: round3(lat[len(lat)*99/100]),
		ScatteredP50us: round3(scattered[len(scattered)/2]), ScatteredP99us: round3(scattered[len(scattered)*99/100]),
		BytesPerBlockEntry: round3(bytesPer), MapBytesPerEntry: round3(mapBytes),
		Blocks: stored, Workers: nWorkers, PromptBlocks: promptBlocks, Lookups: nLookups,
		GOMAXPROCS: 1, GoVersion: runtime.Version(), Timestamp: time.Now().UTC().Format(time.RFC3339),
	}
	r.IngestGoalMet = r.IngestBlocksPerSec >= 1e6
	r.LookupGoalMet = r.LookupP99us <= 100
	r.BytesPerEntryGoalMet = r.BytesPerBlockEntry <= 128
	return r
}

// measure returns sorted lookup latencies in µs; half the lookups share
// only part of a cached prompt.
func measure(idx *kvindex.Index, keys [][]uint64, names []string, n int, rng *rand.Rand) []float64 {
	lat := make([]float64, 0, n)
	var res []kvindex.Match
	for i := range n {
		ks := keys[rng.IntN(len(keys))]
		if i%2 == 1 {
			ks = ks[:rng.IntN(len(ks))+1]
		}
		t0 := time.Now()
		res = idx.Lookup(ks, names, res)
		lat = append(lat, float64(time.Since(t0).Nanoseconds())/1e3)
	}
	slices.Sort(lat)
	return lat
}

func round(v float64) float64  { return float64(int64(v)) }
func round3(v float64) float64 { return float64(int64(v*1000)) / 1000 }
