package kvredis

import (
	"math/rand/v2"
	"testing"

	"github.com/warmpath/warmpath/services/router/kvindex"
)

// The shared index answers what one replica's in-memory index answers,
// now that its entries are split by slot: each worker's GPU and CPU
// blocks under its own tag, every worker's L2 blocks under one. The L2
// chains are the case the split makes hard: a worker's match runs on
// through blocks another worker stored in L2, and on through its own.
func TestLookupMatchesTheLocalIndex(t *testing.T) {
	for _, tc := range []struct {
		name    string
		workers int
		batches int
		l2      float64 // share of ops in the L2 tier
		seed    uint64
	}{
		{"gpu and cpu only", 4, 200, 0, 1},
		{"with l2", 4, 200, 0.3, 2},
		{"mostly l2", 6, 300, 0.7, 3},
		{"one worker", 1, 100, 0.5, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newStore(t)
			rng := rand.New(rand.NewPCG(tc.seed, 0))
			workers := make([]string, tc.workers)
			for i := range workers {
				workers[i] = "http://10.0.0." + string(rune('1'+i)) + ":8000"
			}
			const chains, blocks = 8, 24
			key := func(c, n int) uint64 { return uint64(c)<<16 | uint64(n) }
			seq := make([]uint64, tc.workers)
			// copies each worker holds, per tier and key: a worker's events
			// never remove a block it does not hold
			held := make([][kvindex.NumTiers]map[uint64]int, tc.workers)
			for w := range held {
				for t := range held[w] {
					held[w][t] = map[uint64]int{}
				}
			}
			for range tc.batches {
				w := rng.IntN(tc.workers)
				tier := kvindex.Tier(rng.IntN(2))
				if rng.Float64() < tc.l2 {
					tier = kvindex.L2
				}
				c, from := rng.IntN(chains), rng.IntN(blocks)
				to := from + 1 + rng.IntN(blocks-from)
				remove := rng.IntN(4) == 0
				var ks []uint64
				for n := from; n < to; n++ {
					k := key(c, n)
					if !remove {
						held[w][tier][k]++
					} else if held[w][tier][k] > 0 {
						held[w][tier][k]--
					} else {
						continue
					}
					ks = append(ks, k)
				}
				op := add(tier, ks...)
				if remove {
					op.Kind = kvindex.OpRemove
				}
				if err := s.Commit(&kvindex.Change{Worker: workers[w], Seq: seq[w], Hash: seq[w], Ops: []kvindex.Op{op}}); err != nil {
					t.Fatal(err)
				}
				seq[w]++
			}
			for c := range chains {
				ks := make([]uint64, blocks)
				for n := range ks {
					ks[n] = key(c, n)
				}
				// every worker, and each alone: a worker's L2 counts for
				// workers not asked about too
				for _, ws := range append([][]string{workers}, split(workers)...) {
					got, err := s.LookupShared(ks, ws, nil)
					if err != nil {
						t.Fatal(err)
					}
					want := s.local.Lookup(ks, ws, nil)
					for i := range ws {
						if got[i] != want[i] {
							t.Fatalf("chain %d, worker %s of %d: shared %+v, local %+v", c, ws[i], len(ws), got[i], want[i])
						}
					}
				}
			}
		})
	}
}

func split(ws []string) [][]string {
	out := make([][]string, len(ws))
	for i, w := range ws {
		out[i] = []string{w}
	}
	return out
}

// A worker's L2 chain crosses parts: its own blocks, then blocks only
// other workers stored in L2 (one each), then its own again, which the
// lookup reads in rounds.
func TestLookupChainsThroughOtherWorkersL2(t *testing.T) {
	for _, tc := range []struct {
		name  string
		batch map[string][]kvindex.Op
		want  kvindex.Match // of worker a over blocks 0..5
	}{
		{"own only", map[string][]kvindex.Op{"a": {add(kvindex.GPU, 0, 1), add(kvindex.CPU, 2)}}, kvindex.Match{GPU: 2, Local: 3, Any: 3}},
		{"l2 of others, then own", map[string][]kvindex.Op{
			"a": {add(kvindex.GPU, 0, 1), add(kvindex.CPU, 4)},
			"b": {add(kvindex.L2, 2)},
			"c": {add(kvindex.L2, 3)},
		}, kvindex.Match{GPU: 2, Local: 2, Any: 5}},
		{"l2 from the start", map[string][]kvindex.Op{"b": {add(kvindex.L2, 0, 1, 2)}, "a": {add(kvindex.GPU, 3)}}, kvindex.Match{Any: 4}},
		{"a gap nobody holds", map[string][]kvindex.Op{"a": {add(kvindex.GPU, 0, 2)}, "b": {add(kvindex.L2, 3)}}, kvindex.Match{GPU: 1, Local: 1, Any: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newStore(t)
			for w, ops := range tc.batch {
				if err := s.Commit(&kvindex.Change{Worker: w, Ops: ops}); err != nil {
					t.Fatal(err)
				}
			}
			keys := []uint64{0, 1, 2, 3, 4, 5}
			got, err := s.LookupShared(keys, []string{"a"}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if want := s.local.Lookup(keys, []string{"a"}, nil); got[0] != tc.want || want[0] != tc.want {
				t.Fatalf("shared %+v, local index %+v, want %+v", got[0], want[0], tc.want)
			}
		})
	}
}
