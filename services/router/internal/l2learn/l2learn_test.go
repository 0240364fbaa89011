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

func TestLearnedChunksLeadBoundedByCapacity(t *testing.T) {
	l, err := New(Config{CapacityTokens: 3 * 64, ChunkTokens: 64, BlockSize: 16})
	if err != nil {
		t.Fatal(err)
	}
	a, b := prompt(1, 150), prompt(2, 64) // a: two whole chunks and a part
	if got := l.Leading("m", a); got != 0 {
		t.Fatalf("an empty view credits %d tokens", got)
	}
	l.Learn(kvindex.AppendKeys(nil, kvindex.Seed("m", ""), a, 16))
	for _, tc := range []struct {
		name  string
		model string
		p     []uint32
		want  int
	}{
		{"the whole chunks", "m", a, 128},
		{"a longer prompt sharing them", "m", append(append([]uint32{}, a[:128]...), prompt(3, 200)...), 128},
		{"another model", "other", a, 0},
		{"a prompt diverging in the first chunk", "m", append([]uint32{7}, a[1:]...), 0},
		{"a prompt shorter than a chunk", "m", a[:50], 0},
	} {
		if got := l.Leading(tc.model, tc.p); got != tc.want {
			t.Errorf("%s: %d tokens, want %d", tc.name, got, tc.want)
		}
	}
	// Capacity 3 chunks: b's chunk and another prompt's two push a's out,
	// oldest first.
	l.Learn(kvindex.AppendKeys(nil, kvindex.Seed("m", ""), b, 16))
	l.Learn(kvindex.AppendKeys(nil, kvindex.Seed("m", ""), prompt(4, 128), 16))
	if got := l.Leading("m", a); got != 0 || l.Chunks() != 3 {
		t.Errorf("after 5 chunks in a view of 3: a credited %d tokens, %d chunks held", got, l.Chunks())
	}
	if got := l.Leading("m", b); got != 64 {
		t.Errorf("b credited %d tokens, want 64", got)
	}
}

func TestConfigRefused(t *testing.T) {
	for _, c := range []Config{
		{CapacityTokens: 10, ChunkTokens: 256},
		{CapacityTokens: 1 << 20, ChunkTokens: 100, BlockSize: 16},
		{CapacityTokens: 1 << 20, ChunkTokens: 8, BlockSize: 16},
	} {
		if _, err := New(c); err == nil {
			t.Errorf("New(%+v) accepted", c)
		}
	}
}
