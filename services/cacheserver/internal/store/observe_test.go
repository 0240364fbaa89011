package store

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
)

// recorder is an Observer counting notifications per key.
type recorder struct {
	mu   sync.Mutex
	seen map[string]int
}

func (r *recorder) observe(key string) {
	r.mu.Lock()
	r.seen[key]++
	r.mu.Unlock()
}

func (r *recorder) count(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seen[key]
}

// Present and Range must agree with what the store holds through every
// change an observer is told about, a demotion to disk included: while an
// object waits in the write-behind queue it is neither in memory nor on
// disk, yet still present.
func TestObserverAndPresentThroughDemotion(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	mem := NewMemory(16*(2*EntryOverhead+2*1024+64), Options{}) // two 1 KiB objects per shard
	disk, err := NewDisk(t.TempDir(), 1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	stall := make(chan struct{})
	tier := newTiered(ctx, mem, disk, 1<<20, nil, func() { <-stall })
	rec := &recorder{seen: map[string]int{}}
	tier.Observe(rec.observe)

	keys := make([]string, 200)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%d", i)
		if !tier.Put(keys[i], &Object{Value: bytes.Repeat([]byte{1}, 1024)}) {
			t.Fatalf("put %s refused", keys[i])
		}
	}
	if st := mem.Stats(); st.Evictions == 0 {
		t.Fatal("no evictions: the test needs some")
	}
	for _, k := range keys {
		if rec.count(k) == 0 {
			t.Errorf("%s: observer never told", k)
		}
	}
	// The writer is stalled: evicted objects wait between the tiers.
	checkPresent := func(when string) {
		t.Helper()
		ranged := map[string]bool{}
		tier.Range(func(k string) { ranged[k] = true })
		for _, k := range keys {
			want := tier.Contains(k)
			if got := tier.Present(k); got != want {
				t.Errorf("%s: Present(%s) = %v, Contains %v", when, k, got, want)
			}
			if ranged[k] != want {
				t.Errorf("%s: Range has %s: %v, Contains %v", when, k, ranged[k], want)
			}
		}
	}
	for _, k := range keys {
		if !tier.Present(k) {
			t.Errorf("stalled: %s not present while queued for disk", k)
		}
	}
	close(stall)
	cancel()
	tier.Wait()
	checkPresent("written")
	before := rec.count(keys[0])
	if !tier.Delete(keys[0]) {
		t.Fatalf("delete %s: not found", keys[0])
	}
	if rec.count(keys[0]) == before || tier.Present(keys[0]) {
		t.Errorf("delete: observer told %d times (was %d), present %v", rec.count(keys[0]), before, tier.Present(keys[0]))
	}
	checkPresent("deleted")
}
