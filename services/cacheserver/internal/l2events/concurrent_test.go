package l2events

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"sync"
	"testing"

	"github.com/warmpath/warmpath/libs/kvevents"
	"github.com/warmpath/warmpath/services/cacheserver/internal/store"
)

// syncPub is a fakePub safe to read while Run publishes.
type syncPub struct {
	mu sync.Mutex
	fakePub
}

func (p *syncPub) PublishTopic(topic string, b kvevents.Batch) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fakePub.PublishTopic(topic, b)
}

func (p *syncPub) Sequenced() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fakePub.Sequenced()
}

// Many writers, deleters and readers on a real memory-over-disk store, with
// the tracker running: once they stop and the store settles, replaying the
// published events gives exactly the chunks the store holds, and so does the
// snapshot. Run with -race it also checks the hooks' locking.
func TestTrackerConcurrentTiered(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	mem := store.NewMemory(16*8*(1024+store.EntryOverhead+64), store.Options{})
	disk, err := store.NewDisk(t.TempDir(), 256<<10, nil)
	if err != nil {
		t.Fatal(err)
	}
	tier := store.NewTiered(ctx, mem, disk, 0, nil)
	pub := &syncPub{}
	tr := New(Config{MaxPending: 1 << 20}, tier, pub, counters(), nil)
	if err := disk.Load(); err != nil {
		t.Fatal(err)
	}
	runCtx, stopRun := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { tr.Run(runCtx); close(ran) }()

	keyOf := func(i int) string { return fmt.Sprintf("m@1@%d@%x@bfloat16", i%2, i%300+1) }
	val := bytes.Repeat([]byte{1}, 1024)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 600 {
				k := keyOf(i*7 + w*13)
				switch i % 5 {
				case 0:
					tier.Delete(k)
				case 1:
					tier.Get(k)
				default:
					tier.Put(k, &store.Object{Value: val})
				}
			}
		}()
	}
	wg.Wait()
	cancel()
	tier.Wait() // the write-behind queue is drained
	stopRun()
	<-ran // and the last pass is published

	want := hashSet{}
	for i := range 300 {
		for w := range 2 {
			if k := keyOf(i + 300*w); tier.Contains(k) {
				want[hashOf(t, k)] = true
			}
		}
	}
	got := hashSet{}
	pub.mu.Lock()
	for _, b := range pub.batches {
		for _, e := range b.Events {
			switch e := e.(type) {
			case kvevents.BlockStored:
				got[hex.EncodeToString(e.BlockHashes[0].Bytes())] = true
			case kvevents.BlockRemoved:
				delete(got, hex.EncodeToString(e.BlockHashes[0].Bytes()))
			case kvevents.AllBlocksCleared:
				t.Fatal("AllBlocksCleared: the queue should hold this load")
			}
		}
	}
	pub.mu.Unlock()
	if len(want) == 0 || !mapsEqual(got, want) {
		t.Errorf("stream has %d chunks, store %d", len(got), len(want))
	}
	_, snap, err := tr.Snapshot("m")
	if err != nil || len(snap) != len(want) {
		t.Errorf("snapshot %d chunks (%v), store %d", len(snap), err, len(want))
	}
	for _, h := range snap {
		if !want[hex.EncodeToString(h[:])] {
			t.Errorf("snapshot has %x, the store does not", h)
		}
	}
	t.Logf("store holds %d chunks; %d batches; tiers %+v", len(want), pub.Sequenced(), tier.Tiers())
	if st := mem.Stats(); st.Evictions == 0 {
		t.Error("no evictions: the test wants some")
	}
}

type hashSet map[string]bool

func mapsEqual(a, b hashSet) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}

func hashOf(t *testing.T, key string) string {
	t.Helper()
	k, _, err := ParseKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(k.Hash[:])
}
