package l2learn

import (
	"testing"

	"github.com/warmpath/warmpath/services/router/kvindex"
)

func prompt(seed uint32, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = seed*100000 + uint32(i)
	}
	return out
}

// keys are a prompt's block keys as kvaware hands them to Learn: seeded by
// model and adapter, at the worker's block size.
func keys(model, lora string, p []uint32, block int) []uint64 {
	return kvindex.AppendKeys(nil, kvindex.Seed(model, lora), p, block)
}

func TestLearnedChunksLeadBoundedByCapacity(t *testing.T) {
	for _, block := range []int{16, 32, 64} {
		l, err := New(Config{CapacityTokens: 3 * 64, ChunkTokens: 64})
		if err != nil {
			t.Fatal(err)
		}
		a, b := prompt(1, 150), prompt(2, 64) // a: two whole chunks and a part
		if got := l.Leading("m", "", a); got != 0 {
			t.Fatalf("an empty view credits %d tokens", got)
		}
		l.Learn(keys("m", "", a, block), block)
		for _, tc := range []struct {
			name        string
			model, lora string
			p           []uint32
			want        int
		}{
			{"the whole chunks", "m", "", a, 128},
			{"a longer prompt sharing them", "m", "", append(append([]uint32{}, a[:128]...), prompt(3, 200)...), 128},
			{"another model", "other", "", a, 0},
			{"an adapter of the model", "m", "sql-lora", a, 0},
			{"a prompt diverging in the first chunk", "m", "", append([]uint32{7}, a[1:]...), 0},
			{"a prompt shorter than a chunk", "m", "", a[:50], 0},
		} {
			if got := l.Leading(tc.model, tc.lora, tc.p); got != tc.want {
				t.Errorf("blocks of %d, %s: %d tokens, want %d", block, tc.name, got, tc.want)
			}
		}
		// Capacity 3 chunks: b's chunk and another prompt's two push a's out,
		// oldest first.
		l.Learn(keys("m", "", b, block), block)
		l.Learn(keys("m", "", prompt(4, 128), block), block)
		if got := l.Leading("m", "", a); got != 0 || l.Chunks() != 3 {
			t.Errorf("blocks of %d, after 5 chunks in a view of 3: a credited %d tokens, %d chunks held", block, got, l.Chunks())
		}
		if got := l.Leading("m", "", b); got != 64 {
			t.Errorf("blocks of %d: b credited %d tokens, want 64", block, got)
		}
	}
}

// TestAdaptersApart: a prompt prefilled under a LoRA adapter is credited
// to requests for that adapter only; its KV is not the base model's.
func TestAdaptersApart(t *testing.T) {
	l, err := New(Config{CapacityTokens: 1 << 20, ChunkTokens: 64})
	if err != nil {
		t.Fatal(err)
	}
	p := prompt(1, 128)
	l.Learn(keys("m", "sql-lora", p, 16), 16)
	for lora, want := range map[string]int{"sql-lora": 128, "": 0, "other-lora": 0} {
		if got := l.Leading("m", lora, p); got != want {
			t.Errorf("adapter %q: %d tokens, want %d", lora, got, want)
		}
	}
}

// TestLearnRefusesBlocksThatSplitAChunk: keys at a block size that does
// not divide the chunk cannot mark chunk ends; they are not learned.
func TestLearnRefusesBlocksThatSplitAChunk(t *testing.T) {
	l, err := New(Config{CapacityTokens: 1 << 20, ChunkTokens: 64})
	if err != nil {
		t.Fatal(err)
	}
	p := prompt(1, 128)
	l.Learn(keys("m", "", p, 48), 48)
	if l.Chunks() != 0 || l.Leading("m", "", p) != 0 {
		t.Errorf("learned %d chunks from 48-token blocks of 64-token chunks", l.Chunks())
	}
}

func TestConfigRefused(t *testing.T) {
	for _, c := range []Config{
		{CapacityTokens: 10, ChunkTokens: 256},
		{CapacityTokens: 1 << 20, ChunkTokens: -1},
	} {
		if _, err := New(c); err == nil {
			t.Errorf("New(%+v) accepted", c)
		}
	}
}
