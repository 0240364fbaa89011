package store

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
)

// Store is what the servers read and write: the memory tier alone, or the
// memory tier over a disk tier.
type Store interface {
	Get(key string) (*Object, bool)
	Put(key string, obj *Object) bool
	Contains(key string) bool
	Delete(key string) bool
	// Tiers returns each tier's counters, fastest first.
	Tiers() []TierStats
}

// TierStats names one tier's counters.
type TierStats struct {
	Name string
	Stats
}

// Tiers implements Store for the memory tier alone.
func (m *Memory) Tiers() []TierStats { return []TierStats{{"memory", m.Stats()}} }

// Tiered is the memory tier over the disk tier: objects evicted from memory
// are written behind to disk, and a disk hit is promoted back to memory.
type Tiered struct {
	mem  *Memory
	disk *Disk
	log  *slog.Logger

	queue   chan pending
	dropped atomic.Uint64
	wg      sync.WaitGroup
}

type pending struct {
	key string
	obj *Object
}

// NewTiered joins mem and disk; the write-behind queue holds up to
// queueLen objects (beyond it, an evicted object is dropped, counted). It
// writes until ctx ends, then drains what is queued.
func NewTiered(ctx context.Context, mem *Memory, disk *Disk, queueLen int, log *slog.Logger) *Tiered {
	if queueLen <= 0 {
		queueLen = 1024
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	t := &Tiered{mem: mem, disk: disk, log: log, queue: make(chan pending, queueLen)}
	mem.Evicted = func(key string, obj *Object) {
		select {
		case t.queue <- pending{key, obj}:
		default:
			t.dropped.Add(1)
		}
	}
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		for {
			select {
			case p := <-t.queue:
				t.write(p)
			case <-ctx.Done():
				for {
					select {
					case p := <-t.queue:
						t.write(p)
					default:
						return
					}
				}
			}
		}
	}()
	return t
}

func (t *Tiered) write(p pending) {
	if err := t.disk.Put(p.key, p.obj); err != nil {
		t.log.Warn("disk tier: write-behind failed", "err", err)
	}
}

// Wait waits for the write-behind goroutine to finish (after its context
// ended).
func (t *Tiered) Wait() { t.wg.Wait() }

// Get serves from memory, else from disk (promoting the object).
func (t *Tiered) Get(key string) (*Object, bool) {
	if obj, ok := t.mem.Get(key); ok {
		return obj, true
	}
	obj, ok := t.disk.Get(key)
	if ok {
		t.mem.Put(key, obj)
	}
	return obj, ok
}

// Put stores in memory; the disk sees the object when memory evicts it.
func (t *Tiered) Put(key string, obj *Object) bool {
	if !t.mem.Put(key, obj) {
		return t.disk.Put(key, obj) == nil // too big for memory: straight to disk
	}
	return true
}

// Contains reports whether either tier holds key.
func (t *Tiered) Contains(key string) bool { return t.mem.Contains(key) || t.disk.Contains(key) }

// Delete removes key from both tiers.
func (t *Tiered) Delete(key string) bool {
	a, b := t.mem.Delete(key), t.disk.Delete(key)
	return a || b
}

// Tiers returns memory then disk counters; the disk's Rejected includes
// write-behind drops.
func (t *Tiered) Tiers() []TierStats {
	ds := t.disk.Stats()
	ds.Rejected += t.dropped.Load()
	return []TierStats{{"memory", t.mem.Stats()}, {"disk", ds}}
}
