package tokenizer

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"testing"

	"github.com/warmpath/warmpath/services/router/strategy"
)

// TestCacheByteBudget: answers of 100k tokens (400 KB each) in a 1 MiB
// cache: the cache holds at most two, charged their real size, and the
// oldest are asked again. With a count bound only, all ten would stay.
func TestCacheByteBudget(t *testing.T) {
	srv, calls := worker(t, http.StatusOK, 0)
	const budget = 1 << 20
	c, err := New(Config{CacheBytes: budget})
	if err != nil {
		t.Fatal(err)
	}
	prompt := func(i int) *strategy.Request {
		return &strategy.Request{Model: "m", Prompt: fmt.Sprintf("%03d", i) + strings.Repeat("x", 100_000)}
	}
	for i := range 10 {
		if _, err := c.Tokenize(context.Background(), srv.URL, prompt(i)); err != nil {
			t.Fatal(err)
		}
		n, bytes := c.cache.size()
		if bytes > budget {
			t.Fatalf("after %d answers the cache holds %d entries charged %d bytes, over its %d-byte budget", i+1, n, bytes, budget)
		}
	}
	if n, bytes := c.cache.size(); n != 2 || bytes < 2*400_000 {
		t.Fatalf("cache holds %d entries charged %d bytes; want the last 2, charged at least 800000", n, bytes)
	}
	before := calls.Load()
	if res, _ := c.Tokenize(context.Background(), srv.URL, prompt(9)); !res.Cached {
		t.Fatal("the most recent answer was evicted")
	}
	if res, _ := c.Tokenize(context.Background(), srv.URL, prompt(0)); res.Cached || calls.Load() != before+1 {
		t.Fatalf("the oldest answer was still cached (cached %v, worker calls %d -> %d)", res.Cached, before, calls.Load())
	}
}

// TestCacheOversizeAnswer: an answer larger than the whole budget is
// returned but not cached, and evicts nothing.
func TestCacheOversizeAnswer(t *testing.T) {
	srv, _ := worker(t, http.StatusOK, 0)
	c, err := New(Config{CacheBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	small := &strategy.Request{Model: "m", Prompt: "small"}
	if _, err := c.Tokenize(context.Background(), srv.URL, small); err != nil {
		t.Fatal(err)
	}
	big := &strategy.Request{Model: "m", Prompt: strings.Repeat("y", 20_000)} // 80 KB of ids
	res, err := c.Tokenize(context.Background(), srv.URL, big)
	ids := res.IDs
	if err != nil || len(ids) != 20_000 {
		t.Fatalf("oversize answer: %d ids, err %v", len(ids), err)
	}
	if n, bytes := c.cache.size(); n != 1 || bytes > 64<<10 {
		t.Fatalf("cache holds %d entries, %d bytes; want only the small one", n, bytes)
	}
	if res, _ := c.Tokenize(context.Background(), srv.URL, small); !res.Cached {
		t.Fatal("the oversize answer evicted the small one")
	}
}

// TestCacheEntriesBound: the entry bound still holds for small answers.
func TestCacheEntriesBound(t *testing.T) {
	srv, _ := worker(t, http.StatusOK, 0)
	c, err := New(Config{CacheEntries: 3})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if _, err := c.Tokenize(context.Background(), srv.URL, &strategy.Request{Model: "m", Prompt: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if n, bytes := c.cache.size(); n != 3 || bytes < 3*entryOverhead || bytes > 3*(entryOverhead+64) {
		t.Fatalf("cache holds %d entries charged %d bytes; want 3", n, bytes)
	}
}

// TestCacheEntryCost: what an entry is charged covers what it costs.
func TestCacheEntryCost(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates")
	}
	const n = 1 << 16
	heap := func() int64 {
		runtime.GC()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return int64(ms.HeapAlloc)
	}
	before := heap()
	c, err := newCache(n, 1<<40)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		c.add(uint64(i), make([]uint32, 16))
	}
	used := heap() - before
	_, charged := c.size()
	t.Logf("%d entries of 16 tokens: %d bytes used, %d charged (%.0f a entry used)", n, used, charged, float64(used)/n)
	if used > charged {
		t.Fatalf("%d entries use %d bytes but are charged %d", n, used, charged)
	}
	runtime.KeepAlive(c)
}
