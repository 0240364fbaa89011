package store

import (
	"bytes"
	"fmt"
	"sync"
	"testing"
)

func obj(n int) *Object { return &Object{Value: bytes.Repeat([]byte{1}, n)} }

func TestPutGetDelete(t *testing.T) {
	m := NewMemory(16<<20, Options{})
	o := &Object{Value: []byte("kv bytes")}
	o.Meta.Dtype = 3
	if !m.Put("k", o) {
		t.Fatal("put refused")
	}
	got, ok := m.Get("k")
	if !ok || got != o || got.Meta.Dtype != 3 {
		t.Fatalf("get: %v %v", got, ok)
	}
	m.Put("k", &Object{Value: []byte("v2")})
	if got, _ := m.Get("k"); string(got.Value) != "v2" {
		t.Fatal("replace did not take")
	}
	if !m.Delete("k") || m.Contains("k") {
		t.Fatal("delete")
	}
	if _, ok := m.Get("k"); ok {
		t.Fatal("deleted key still served")
	}
	st := m.Stats()
	if st.Hits != 2 || st.Misses != 1 || st.Objects != 0 || st.Bytes != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestCapacityBound: resident bytes, overhead included, never exceed the
// configured capacity, and fill at least 90% of it. (Each of the 16 shards
// has a sixteenth of the capacity, so values near that size fill less.)
func TestCapacityBound(t *testing.T) {
	tests := []struct {
		name     string
		capacity int64
		valueLen int
	}{
		{"large values", 64 << 20, 256 << 10},
		{"small values", 4 << 20, 100},
		{"mixed", 32 << 20, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := NewMemory(tt.capacity, Options{})
			evicted := 0
			m.Evicted = func(string, *Object) { evicted++ }
			// Three times the capacity streams through.
			mean := tt.valueLen
			if mean == 0 {
				mean = 128 << 10
			}
			puts := int(3 * tt.capacity / int64(mean+EntryOverhead))
			for i := range puts {
				n := tt.valueLen
				if n == 0 {
					n = 1 + (i*7919)%(256<<10)
				}
				m.Put(fmt.Sprintf("key-%d", i), obj(n))
				if st := m.Stats(); i%97 == 0 && st.Bytes > tt.capacity {
					t.Fatalf("after %d puts: %d bytes resident, capacity %d", i, st.Bytes, tt.capacity)
				}
			}
			st := m.Stats()
			if float64(st.Bytes) < 0.9*float64(tt.capacity) {
				t.Errorf("only %d of %d bytes used", st.Bytes, tt.capacity)
			}
			if evicted == 0 || uint64(evicted) != st.Evictions {
				t.Errorf("evicted callback %d times, stats say %d", evicted, st.Evictions)
			}
		})
	}
}

// TestScanResistance: a hot set that is read keeps its place while a scan
// of one-time keys twice the capacity streams through.
func TestScanResistance(t *testing.T) {
	m := NewMemory(16<<20, Options{}) // 1 MiB per shard
	const hot = 64
	val := 64 << 10
	for i := range hot {
		m.Put(fmt.Sprintf("hot-%d", i), obj(val))
	}
	for round := range 3 {
		for i := range hot {
			m.Get(fmt.Sprintf("hot-%d", i))
		}
		for i := range 512 { // 32 MiB of one-hit wonders
			m.Put(fmt.Sprintf("scan-%d-%d", round, i), obj(val))
		}
	}
	kept := 0
	for i := range hot {
		if m.Contains(fmt.Sprintf("hot-%d", i)) {
			kept++
		}
	}
	if kept < hot*9/10 {
		t.Fatalf("only %d of %d hot objects survived the scan", kept, hot)
	}
}

func TestOversizedRejected(t *testing.T) {
	m := NewMemory(1<<20, Options{})
	if m.Put("big", obj(1<<20)) {
		t.Fatal("an object larger than a shard was stored")
	}
	if m.Stats().Rejected != 1 {
		t.Fatal("rejection not counted")
	}
}

func TestConcurrent(t *testing.T) {
	m := NewMemory(8<<20, Options{})
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 2000 {
				k := fmt.Sprintf("k-%d", (w*31+i)%500)
				switch i % 3 {
				case 0:
					m.Put(k, obj(4<<10))
				case 1:
					m.Get(k)
				default:
					m.Delete(k)
				}
			}
		})
	}
	wg.Wait()
	if st := m.Stats(); st.Bytes > st.Capacity || st.Bytes < 0 {
		t.Fatalf("stats %+v", st)
	}
}
