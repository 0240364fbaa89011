package lmcache

import (
	"testing"

	"github.com/warmpath/warmpath/libs/blockhash"
	"github.com/warmpath/warmpath/tools/vllmsim/kvblock"
)

func tokens(seed, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(seed*1_000_000 + i)
	}
	return out
}

func newL1(t *testing.T, chunks int) *L1 {
	t.Helper()
	return newL1Mode(t, chunks, "")
}

func newL1Mode(t *testing.T, chunks int, mode EventMode) *L1 {
	t.Helper()
	h, err := blockhash.New("1")
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(Config{ChunkSize: 4, MaxBytes: int64(chunks) * 4 * 10, BytesPerToken: 10, Events: mode}, h)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestLookupAfterStore(t *testing.T) {
	c := newL1(t, 10)
	if hit := c.Lookup(tokens(1, 10), nil); hit.CPU != 0 {
		t.Fatalf("empty L1 hit %d tokens", hit.CPU)
	}
	c.Store(tokens(1, 10), nil) // 2 whole chunks, 2 tokens unsaved
	tests := []struct {
		name  string
		query []uint32
		want  int
	}{
		{"same prompt", tokens(1, 10), 8},
		{"longer prompt", tokens(1, 30), 8},
		{"shorter prompt", tokens(1, 5), 4},
		{"other prompt", tokens(2, 10), 0},
	}
	for _, tt := range tests {
		if got := c.Lookup(tt.query, nil).CPU; got != tt.want {
			t.Errorf("%s: hit %d tokens, want %d", tt.name, got, tt.want)
		}
	}
	if got := c.Lookup(tokens(1, 10), []string{"salt"}).CPU; got != 0 {
		t.Errorf("salted lookup hit %d tokens, want 0", got)
	}
	if got, want := c.UsageBytes(), int64(2*4*10); got != want {
		t.Errorf("UsageBytes = %d, want %d", got, want)
	}
}

// TestLRUEvictionAndEvents checks eviction order and, per event mode, what
// the events say: full events replay to exactly the resident set;
// store-only ones to a superset (every resident chunk was announced, no
// removal ever is); none say nothing.
func TestLRUEvictionAndEvents(t *testing.T) {
	for _, mode := range []EventMode{EventsFull, EventsStoreOnly, EventsNone} {
		t.Run(string(mode), func(t *testing.T) {
			c := newL1Mode(t, 3, mode)
			c.Store(tokens(1, 8), nil) // chunks a0 a1
			c.Store(tokens(2, 4), nil) // chunk b0 → full
			c.Lookup(tokens(1, 8), nil)
			c.Store(tokens(1, 8), nil) // touch a0 a1: b0 is now least recent
			c.Store(tokens(3, 4), nil) // c0 evicts b0
			if got := c.Lookup(tokens(2, 4), nil).CPU; got != 0 {
				t.Errorf("b0 still resident after eviction (hit %d)", got)
			}
			if got := c.Lookup(tokens(1, 8), nil).CPU; got != 8 {
				t.Errorf("recently used a hit %d tokens, want 8", got)
			}
			if got := c.Counters().Evictions; got != 1 {
				t.Errorf("evictions = %d, want 1", got)
			}
			live := map[blockhash.Hash]bool{}
			removals := 0
			for _, ev := range c.TakeEvents() {
				if ev.Medium != MediumCPU || ev.BlockSize != 4 {
					t.Fatalf("event medium %q block size %d, want CPU and 4", ev.Medium, ev.BlockSize)
				}
				if ev.Kind == kvblock.Removed {
					removals++
				}
				for _, h := range ev.Hashes {
					live[h] = ev.Kind == kvblock.Stored
				}
			}
			n := 0
			for _, ok := range live {
				if ok {
					n++
				}
			}
			resident := c.Hashes()
			switch mode {
			case EventsFull:
				if n != c.Len() || removals != 1 {
					t.Errorf("events leave %d chunks live (%d removals), store holds %d", n, removals, c.Len())
				}
			case EventsStoreOnly:
				if n != 4 || removals != 0 {
					t.Errorf("store-only: %d chunks announced, %d removals; want all 4 stores, no removal", n, removals)
				}
				for _, h := range resident {
					if !live[h] {
						t.Errorf("resident chunk %x never announced", h[:4])
					}
				}
			case EventsNone:
				if len(live) != 0 {
					t.Errorf("none: %d chunks announced, want no CPU event", len(live))
				}
			}
		})
	}
}

func TestParseEventMode(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want EventMode
		ok   bool
	}{
		{"", EventsStoreOnly, true}, {"store-only", EventsStoreOnly, true}, {"none", EventsNone, true},
		{"full", EventsFull, true}, {"FULL", "", false}, {"stores", "", false},
	} {
		got, err := ParseEventMode(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseEventMode(%q) = %q, %v; want %q, ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func TestZeroCapacityStoresNothing(t *testing.T) {
	h, _ := blockhash.New("1")
	c, err := New(Config{ChunkSize: 4, MaxBytes: 0, BytesPerToken: 10}, h)
	if err != nil {
		t.Fatal(err)
	}
	c.Store(tokens(1, 8), nil)
	if c.Lookup(tokens(1, 8), nil).CPU != 0 || c.Len() != 0 {
		t.Fatal("zero-capacity L1 stored a chunk")
	}
}

func TestResidentAgreesWithLookup(t *testing.T) {
	c := newL1(t, 3)
	c.Store(tokens(1, 12), nil) // chunks 0, 1, 2 of prompt 1
	c.Store(tokens(2, 4), nil)  // evicts prompt 1's chunk 0, the least recent
	chain := func(seed, n int) []blockhash.Hash { return c.hasher.Chain(tokens(seed, n), 4, nil) }
	for _, tc := range []struct {
		name   string
		hashes []blockhash.Hash
		want   int
	}{
		{"leading chunk evicted", chain(1, 12), 0},
		{"run after the evicted chunk", chain(1, 12)[1:], 2},
		{"other prompt", chain(2, 8), 1},
		{"nothing asked", nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := c.Counters()
			if got := c.Resident(tc.hashes); got != tc.want {
				t.Fatalf("Resident = %d, want %d", got, tc.want)
			}
			if c.Counters() != before {
				t.Fatalf("Resident changed the counters: %+v -> %+v", before, c.Counters())
			}
		})
	}
	if got := c.Lookup(tokens(2, 8), nil).CPU; got != 4*c.Resident(chain(2, 8)) {
		t.Fatalf("Lookup hit %d tokens, Resident says %d chunks", got, c.Resident(chain(2, 8)))
	}
}
