package des

import (
	"testing"

	"github.com/warmpath/warmpath/libs/timing"
	"github.com/warmpath/warmpath/tools/vllmsim/lmcache"
)

// twoWorkersOneL2 are two workers' connectors over one shared L2 of l2Chunks chunks.
func twoWorkersOneL2(t *testing.T, l2Chunks int) (a, b *tiered, l2 *lmcache.L1) {
	t.Helper()
	f, err := newFleet(Config{Workers: 2, L1Bytes: 1e9, L2Bytes: 1})
	if err != nil {
		t.Fatal(err)
	}
	f.cfg.L2Bytes = int64(l2Chunks) * l1ChunkTokens * f.l1BytesPerToken()
	if l2, err = f.l2Store(); err != nil {
		t.Fatal(err)
	}
	conn := func() *tiered {
		w, err := f.worker(1, l2)
		if err != nil {
			t.Fatal(err)
		}
		return &tiered{l1: w.l1, l2: l2, hasher: f.hasher, model: f.model}
	}
	return conn(), conn(), l2
}

func prompt(seed uint32, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = seed<<20 | uint32(i)
	}
	return out
}

func TestTieredSharesThroughL2(t *testing.T) {
	const cs = l1ChunkTokens
	for _, tc := range []struct {
		name     string
		l2Chunks int
		stored   []uint32 // what worker a prefilled
		asked    []uint32 // what worker b looks up and fetches
		want     int      // tokens b finds in L2 and fetches
	}{
		{"whole prompt from L2", 16, prompt(1, 4*cs), prompt(1, 4*cs+10), 4 * cs},
		{"shared prefix only", 16, prompt(1, 4*cs), append(prompt(1, 2*cs), prompt(2, 2*cs)...), 2 * cs},
		{"L2 evicted the head", 2, prompt(1, 4*cs), prompt(1, 4*cs), 0},
		{"nothing shared", 16, prompt(1, 4*cs), prompt(2, 4*cs), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b, _ := twoWorkersOneL2(t, tc.l2Chunks)
			a.Store(tc.stored, nil)
			if hit := b.Lookup(tc.asked, nil); hit.CPU != 0 || hit.Remote != tc.want {
				t.Fatalf("lookup %+v, want %d remote tokens and none in b's own L1", hit, tc.want)
			}
			end, secs := b.FetchRemote(tc.asked, nil, 0, tc.want)
			if end != tc.want || secs != a.model.NetworkSeconds(tc.want) {
				t.Fatalf("fetch ended at %d in %g s, want %d in %g s", end, secs, tc.want, a.model.NetworkSeconds(tc.want))
			}
			// Fetched chunks are promoted into b's L1, as LMCache promotes them.
			if hit := b.Lookup(tc.asked, nil); hit.CPU != tc.want {
				t.Fatalf("after the fetch b's L1 holds %d tokens, want %d", hit.CPU, tc.want)
			}
		})
	}
}

// TestFetchChargesTheRemoteTier: the network seconds a fetch reports, plus
// its PCIe copy (charged as an L1 load), are what libs/timing prices a
// remote load at, which is what kvaware's L2 credit assumes.
func TestFetchChargesTheRemoteTier(t *testing.T) {
	a, b, _ := twoWorkersOneL2(t, 64)
	for _, n := range []int{1, 4, 32} {
		p := prompt(uint32(n), n*l1ChunkTokens)
		a.Store(p, nil)
		end, secs := b.FetchRemote(p, nil, 0, len(p))
		got := secs + a.model.LoadSeconds(timing.TierCPU, end)
		if want := a.model.LoadSeconds(timing.TierRemote, len(p)); end != len(p) || !near(got, want) {
			t.Errorf("%d chunks: charged %g s for %d tokens, the remote tier costs %g s", n, got, end, want)
		}
	}
}

// TestFetchStopsAtEviction: a chunk L2 evicted between lookup and fetch
// ends the fetch there; the rest is recomputed.
func TestFetchStopsAtEviction(t *testing.T) {
	a, b, _ := twoWorkersOneL2(t, 4)
	p := prompt(1, 4*l1ChunkTokens)
	a.Store(p, nil)
	if hit := b.Lookup(p, nil); hit.Remote != len(p) {
		t.Fatalf("lookup %+v, want all %d tokens remote", hit, len(p))
	}
	a.Store(prompt(9, 2*l1ChunkTokens), nil) // evicts p's two oldest chunks
	if end, secs := b.FetchRemote(p, nil, 0, len(p)); end != 0 || secs != 0 {
		t.Fatalf("fetch ended at %d in %g s after the head was evicted, want nothing fetched", end, secs)
	}
}

func TestL2ViewLeading(t *testing.T) {
	a, _, l2 := twoWorkersOneL2(t, 16)
	p := prompt(1, 3*l1ChunkTokens+5)
	a.Store(p, nil)
	v := l2View{store: l2}
	for _, tc := range []struct {
		name, lora string
		tokens     []uint32
		want       int
	}{
		{"held prompt, whole chunks", "", p, 3 * l1ChunkTokens},
		{"longer prompt", "", append(p[:3*l1ChunkTokens:3*l1ChunkTokens], prompt(7, l1ChunkTokens)...), 3 * l1ChunkTokens},
		{"adapter request", "lora-a", p, 0},
		{"unknown prompt", "", prompt(2, 2*l1ChunkTokens), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := v.Leading("m", tc.lora, tc.tokens); got != tc.want {
				t.Fatalf("Leading = %d, want %d", got, tc.want)
			}
		})
	}
}

func near(a, b float64) bool { return a-b < 1e-12 && b-a < 1e-12 }
