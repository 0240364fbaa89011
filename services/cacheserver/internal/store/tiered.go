package store

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Tiered is the memory tier over the disk tier: objects evicted from memory
// are written behind to disk, and a disk hit is promoted back to memory.
type Tiered struct {
	mem  *Memory
	disk *Disk
	log  *slog.Logger

	queue    chan pending
	maxBytes int64
	queued   atomic.Int64 // bytes in queue, held against the memory tier
	dropped  atomic.Uint64
	wg       sync.WaitGroup
	// enqueued and written count objects put on the queue and written
	// behind (or skipped): the queue is idle when they are equal.
	enqueued, written atomic.Uint64

	beforeWrite func() // test hook: stalls the writer

	// pending counts each key's objects between memory and disk (evicted,
	// queued or being written), so Present holds through a demotion.
	pmu     sync.Mutex
	pending map[string]int
	observe atomic.Pointer[Observer]
}

type pending struct {
	key  string
	obj  *Object
	size int64
}

// queueSlots bounds the write-behind queue's length; its bytes are bounded
// by NewTiered's queueBytes.
const queueSlots = 4096

// NewTiered joins mem and disk. Objects memory evicts wait for the disk in
// a write-behind queue of at most queueBytes (default: an eighth of the
// memory capacity), keys and overhead included, counted against the memory
// tier's capacity while they wait (they are still in memory); beyond it,
// an evicted object is dropped, counted. It writes until ctx ends, then
// drains what is queued.
func NewTiered(ctx context.Context, mem *Memory, disk *Disk, queueBytes int64, log *slog.Logger) *Tiered {
	return newTiered(ctx, mem, disk, queueBytes, log, nil)
}

func newTiered(ctx context.Context, mem *Memory, disk *Disk, queueBytes int64, log *slog.Logger, beforeWrite func()) *Tiered {
	if queueBytes <= 0 {
		queueBytes = mem.Stats().Capacity / 8
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	t := &Tiered{mem: mem, disk: disk, log: log, queue: make(chan pending, queueSlots), maxBytes: queueBytes, beforeWrite: beforeWrite,
		pending: map[string]int{}}
	mem.setDemote(t.markPending)
	mem.Evicted = func(key string, obj *Object) {
		size := obj.size(key)
		if t.queued.Add(size) > t.maxBytes {
			t.queued.Add(-size)
			t.dropped.Add(1)
			t.unmarkPending(key)
			return
		}
		select {
		case t.queue <- pending{key, obj, size}:
			mem.hold(size)
			t.enqueued.Add(1)
		default:
			t.queued.Add(-size)
			t.dropped.Add(1)
			t.unmarkPending(key)
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
	defer func() {
		t.queued.Add(-p.size)
		t.mem.hold(-p.size)
		t.written.Add(1)
		t.unmarkPending(p.key) // after the disk has it (or has failed to)
	}()
	if t.beforeWrite != nil {
		t.beforeWrite()
	}
	if p.obj.expired(t.mem.now()) {
		return // expired while queued: not worth a file
	}
	if err := t.disk.Put(p.key, p.obj); err != nil {
		t.log.Warn("disk tier: write-behind failed", "err", err)
	}
}

// markPending is the memory tier's demote hook: key's object is on its way
// to the write-behind queue.
func (t *Tiered) markPending(key string) {
	t.pmu.Lock()
	t.pending[key]++
	t.pmu.Unlock()
}

// unmarkPending ends one object's passage from memory to disk (written,
// dropped or expired) and tells the observer, which may find the key gone.
func (t *Tiered) unmarkPending(key string) {
	t.pmu.Lock()
	if t.pending[key] <= 1 {
		delete(t.pending, key)
	} else {
		t.pending[key]--
	}
	t.pmu.Unlock()
	if fn := t.observe.Load(); fn != nil {
		(*fn)(key)
	}
}

// Observe installs fn on both tiers and the write-behind queue (see
// Observer). Install it before the store is used and before the disk tier
// loads.
func (t *Tiered) Observe(fn Observer) {
	t.observe.Store(&fn)
	t.mem.Observe(fn)
	t.disk.Observe(fn)
}

// Present reports whether key is anywhere in the store: in memory, on its
// way to disk, or on disk. A demotion never makes it false: the queue's
// mark is taken under the memory tier's lock before the object leaves it,
// and dropped only after the disk has indexed it.
func (t *Tiered) Present(key string) bool {
	if t.mem.Present(key) {
		return true
	}
	t.pmu.Lock()
	_, ok := t.pending[key]
	t.pmu.Unlock()
	return ok || t.disk.Present(key)
}

// Range calls fn for every key Present reports, possibly more than once,
// with one lock held at a time: fn must not call into the store.
func (t *Tiered) Range(fn func(key string)) {
	t.mem.Range(fn)
	t.pmu.Lock()
	for k := range t.pending {
		fn(k)
	}
	t.pmu.Unlock()
	t.disk.Range(fn)
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
		t.mem.put(key, obj) // keeps the expiry it was stored with
	}
	return obj, ok
}

// Put stores in memory; the disk sees the object when memory evicts it.
//
// A disk copy of an older object under key is deleted first: left there,
// it would be served again (with its old value and expiry) if this one
// left memory without being written behind (a full queue, an expiry).
func (t *Tiered) Put(key string, obj *Object) bool {
	t.mem.applyDefault(obj)
	t.disk.Delete(key)
	if obj.expired(t.mem.now()) {
		t.mem.Delete(key)
		return true
	}
	if !t.mem.put(key, obj) {
		return t.disk.Put(key, obj) == nil // too big for memory: straight to disk
	}
	return true
}

// Now is the memory tier's clock (the disk tier is given the same one).
func (t *Tiered) Now() time.Time { return t.mem.Now() }

// Expires returns key's expiry from the tier that serves it.
func (t *Tiered) Expires(key string) (int64, bool) {
	if at, ok := t.mem.Expires(key); ok {
		return at, true
	}
	return t.disk.Expires(key)
}

// SetExpires changes key's expiry where it is served from. A copy held in
// memory is the current one: the disk's copy, now stale, is deleted (memory
// writes the object behind when it evicts it). A key on disk alone is
// rewritten with its new expiry.
func (t *Tiered) SetExpires(key string, at int64) bool {
	if t.mem.SetExpires(key, at) {
		t.disk.Delete(key)
		return true
	}
	obj, ok := t.disk.Get(key)
	if !ok {
		return false
	}
	if at != 0 && at <= t.mem.now() {
		t.disk.Delete(key)
		return true
	}
	c := *obj
	c.Expires = at
	if err := t.disk.Put(key, &c); err != nil {
		t.log.Warn("disk tier: rewriting an expiry failed", "err", err)
		t.disk.Delete(key) // never leave the old expiry in force
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
