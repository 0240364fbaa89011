package kvindex

import (
	"math/rand/v2"
	"strconv"
	"testing"
)

// BenchmarkLookup looks up an 8K-token prompt (512 blocks of 16) in an
// index of 1M blocks across 16 workers; bench-index reports the latency
// distribution of the same walk.
func BenchmarkLookup(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	names := make([]string, 16)
	for i := range names {
		names[i] = "w" + strconv.Itoa(i)
	}
	x := New(1 << 21)
	var prompts [][]uint64
	for i := 0; i < 1<<20/512; i++ {
		toks := make([]uint32, 512*16)
		for j := range toks {
			toks[j] = rng.Uint32()
		}
		ks := AppendKeys(nil, Seed("m", ""), toks, 16)
		x.Add(names[i%16], GPU, ks)
		prompts = append(prompts, ks)
	}
	var out []Match
	b.ResetTimer()
	for i := range b.N {
		out = x.Lookup(prompts[i%len(prompts)], names, out)
	}
}

// BenchmarkIngest stores 16-block batches into a growing index.
func BenchmarkIngest(b *testing.B) {
	x := New(1 << 20)
	keys := make([]uint64, 16)
	b.ResetTimer()
	for i := range b.N {
		for j := range keys {
			keys[j] = uint64(i)*16 + uint64(j)
		}
		x.Add("w", GPU, keys)
	}
	b.ReportMetric(float64(b.N*16)/b.Elapsed().Seconds(), "blocks/s")
}
