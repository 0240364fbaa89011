package store

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// TestReserveCountsInCapacity: bytes reserved for a value being received
// count against the memory tier: stored objects are evicted to make room
// at once, and the room is given back on release.
func TestReserveCountsInCapacity(t *testing.T) {
	const capacity = 16 * 64 << 10 // 64 KiB a shard
	tests := []struct {
		name    string
		reserve int64
	}{{"a quarter", capacity / 4}, {"a sixteenth", capacity / 16}, {"one byte", 1}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := NewMemory(capacity, Options{ReserveLimit: capacity / 4})
			for i := range 200 {
				m.Put(fmt.Sprint(i), obj(4<<10))
			}
			release, err := m.Reserve(context.Background(), tt.reserve)
			if err != nil {
				t.Fatal(err)
			}
			if st := m.Stats(); st.Bytes+tt.reserve > capacity {
				t.Fatalf("stored %d + reserved %d > capacity %d", st.Bytes, tt.reserve, capacity)
			}
			release()
			for i := range 200 {
				m.Put(fmt.Sprint("again", i), obj(4<<10))
			}
			if st := m.Stats(); st.Bytes < capacity*8/10 {
				t.Fatalf("after release the tier fills only %d of %d", st.Bytes, capacity)
			}
		})
	}
}

// TestReserveWaitsForBudget: reservations beyond the limit wait for a
// release (or their context); one larger than the limit alone is let in
// when nothing else is reserved.
func TestReserveWaitsForBudget(t *testing.T) {
	m := NewMemory(16<<20, Options{ReserveLimit: 1 << 20})
	r1, err := m.Reserve(context.Background(), 768<<10)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan error, 1)
	go func() {
		r, err := m.Reserve(ctx, 512<<10)
		if err == nil {
			r()
		}
		got <- err
	}()
	cancel()
	if err := <-got; !errors.Is(err, context.Canceled) {
		t.Fatalf("over the limit with a cancelled context: %v, want context.Canceled", err)
	}
	go func() {
		r, err := m.Reserve(context.Background(), 4<<20) // over the limit by itself
		if err == nil {
			r()
		}
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("admitted while another reservation is held: %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	r1()
	if err := <-got; err != nil {
		t.Fatalf("after the release: %v", err)
	}
}

// TestWriteBehindQueueBounded: while the disk writer is stalled, objects
// memory evicts queue up to the byte bound, inside the memory capacity;
// beyond it they are dropped (counted).
func TestWriteBehindQueueBounded(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	const capacity = 16 * 256 << 10
	mem := NewMemory(capacity, Options{})
	disk, err := OpenDisk(t.TempDir(), 64<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	const queueBytes = 512 << 10
	stall := make(chan struct{})
	tier := newTiered(ctx, mem, disk, queueBytes, nil, func() { <-stall })
	for i := range 400 {
		tier.Put(fmt.Sprint(i), obj(20<<10))
		st := mem.Stats()
		if q := tier.queued.Load(); q > queueBytes || st.Bytes+q > capacity {
			t.Fatalf("after %d puts: queued %d (bound %d), stored %d, capacity %d", i+1, q, queueBytes, st.Bytes, capacity)
		}
	}
	if tier.dropped.Load() == 0 {
		t.Fatal("nothing was dropped with the writer stalled")
	}
	close(stall)
	cancel()
	tier.Wait()
	if q := tier.queued.Load(); q != 0 {
		t.Fatalf("%d bytes still accounted after the queue drained", q)
	}
}

// TestGrowDoesNotWait: a value admitted by Reserve grows past the limit
// without waiting for itself, and other values wait until it is given
// back.
func TestGrowDoesNotWait(t *testing.T) {
	m := NewMemory(16<<20, Options{ReserveLimit: 256 << 10})
	first, err := m.Reserve(context.Background(), 256<<10)
	if err != nil {
		t.Fatal(err)
	}
	steps := []func(){first}
	for range 3 {
		steps = append(steps, m.Grow(256<<10)) // would deadlock if it waited
	}
	got := make(chan error, 1)
	go func() {
		r, err := m.Reserve(context.Background(), 1)
		if err == nil {
			r()
		}
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("another value admitted while 1 MiB is reserved past a 256 KiB limit: %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	for _, r := range steps {
		r()
	}
	if err := <-got; err != nil {
		t.Fatalf("after the release: %v", err)
	}
}
