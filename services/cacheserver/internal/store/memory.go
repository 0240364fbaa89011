package store

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
)

// Options configure the memory tier.
type Options struct {
	// DefaultTTL is given to objects stored without an expiry (0: none).
	DefaultTTL time.Duration
	// Now is the clock expiries are measured against (time.Now when nil);
	// tests inject one to expire objects without sleeping.
	Now func() time.Time
	// ReserveLimit bounds the bytes Reserve hands out at once (values being
	// received); default a quarter of the capacity.
	ReserveLimit int64
}

// Memory is the memory tier: sixteen S3-FIFO caches (s3fifo), keys spread
// over them by hash, each behind its own lock so that readers of different
// keys seldom wait for each other. Safe for concurrent use.
type Memory struct {
	shards     []*shard
	defaultTTL time.Duration
	clock      func() time.Time
	// Evicted, when set, receives objects pushed out for space (the disk
	// tier writes them behind). Called with no lock held. Expired objects
	// are not passed on.
	Evicted func(key string, obj *Object)

	hits, misses, evictions, rejected, expired atomic.Uint64

	// held is memory counted against the capacity that is not stored
	// objects: values being received (Reserve) and objects queued for the
	// disk tier. Each shard holds its sixteenth less.
	held atomic.Int64

	resMu       sync.Mutex
	reserved    int64         // what Reserve has handed out
	resLimit    int64         // bound on reserved
	resReleased chan struct{} // closed (and replaced) on each release
}

const numShards = 16

// NewMemory returns a memory tier holding at most capacity bytes.
func NewMemory(capacity int64, opts Options) *Memory {
	m := &Memory{shards: make([]*shard, numShards), defaultTTL: opts.DefaultTTL, clock: opts.Now,
		resLimit: opts.ReserveLimit, resReleased: make(chan struct{})}
	if m.resLimit <= 0 {
		m.resLimit = capacity / 4
	}
	if m.clock == nil {
		m.clock = time.Now
	}
	for i := range m.shards {
		m.shards[i] = newShard(capacity / numShards)
	}
	return m
}

// Now returns the tier's clock reading: servers turn a relative TTL into
// Object.Expires with it.
func (m *Memory) Now() time.Time { return m.clock() }

func (m *Memory) now() int64 { return m.clock().UnixNano() }

// applyDefault gives obj the default TTL when it has no expiry of its own.
func (m *Memory) applyDefault(obj *Object) {
	if obj.Expires == 0 && m.defaultTTL > 0 {
		obj.Expires = m.now() + int64(m.defaultTTL)
	}
}

// lookup returns key's live entry with the shard locked, removing it if it
// has expired. The caller unlocks s.mu.
func (m *Memory) lookup(s *shard, key string) (*entry, bool) {
	e, reclaimed := s.lookup(key, m.now)
	if reclaimed {
		m.expired.Add(1)
	}
	return e, e != nil
}

func (m *Memory) shard(key string) *shard {
	return m.shards[xxhash.Sum64String(key)%numShards]
}

// Get returns the object stored under key. The object must not be
// modified.
func (m *Memory) Get(key string) (*Object, bool) {
	s := m.shard(key)
	s.mu.Lock()
	e, ok := m.lookup(s, key)
	var obj *Object
	if ok {
		obj = e.obj // under the lock: SetExpires swaps it
		s.hit(e)
	}
	s.mu.Unlock()
	if !ok {
		m.misses.Add(1)
		return nil, false
	}
	m.hits.Add(1)
	return obj, true
}

// Contains reports whether key is stored, without counting a hit.
func (m *Memory) Contains(key string) bool {
	s := m.shard(key)
	s.mu.Lock()
	_, ok := m.lookup(s, key)
	s.mu.Unlock()
	return ok
}

// Put stores obj under key, replacing any object there; it takes obj (an
// object without an expiry is given the default TTL). It reports false
// when obj is larger than a shard's capacity and was not stored. An
// object that has already expired replaces the key by deleting it.
func (m *Memory) Put(key string, obj *Object) bool {
	m.applyDefault(obj)
	return m.put(key, obj)
}

// put is Put without the default TTL: promotion from the disk tier keeps
// the expiry an object was stored with.
func (m *Memory) put(key string, obj *Object) bool {
	s := m.shard(key)
	size := obj.size(key)
	if size > s.capacity {
		m.rejected.Add(1)
		return false
	}
	now := m.now()
	if obj.expired(now) {
		m.Delete(key)
		return true
	}
	s.mu.Lock()
	evicted, expired := s.put(key, obj, size, now, m.room(s))
	s.mu.Unlock()
	m.evicted(evicted, expired)
	return true
}

// room is what a shard may store now: its capacity less its share of the
// memory held outside the shards.
func (m *Memory) room(s *shard) int64 { return max(s.capacity-m.held.Load()/numShards, 0) }

func (m *Memory) evicted(evicted []*entry, expired int) {
	m.evictions.Add(uint64(len(evicted)))
	m.expired.Add(uint64(expired))
	if m.Evicted != nil {
		for _, e := range evicted {
			m.Evicted(e.key, e.obj)
		}
	}
}

// hold counts n bytes held outside the shards against the capacity (n < 0
// gives them back). The shards shrink to fit on their next Put, or at once
// with shrink.
func (m *Memory) hold(n int64) { m.held.Add(n) }

// shrink evicts from every shard what no longer fits beside the held
// memory.
func (m *Memory) shrink() {
	now := m.now()
	for _, s := range m.shards {
		s.mu.Lock()
		evicted, expired := s.fit(m.room(s), now)
		s.mu.Unlock()
		m.evicted(evicted, expired)
	}
}

// Reserve counts n bytes about to be allocated (a value being received)
// against the capacity, evicting stored objects to make room at once, and
// returns the function that gives them back (once the value is stored or
// dropped). Reservations outstanding at once are bounded by
// Options.ReserveLimit: beyond it Reserve waits for a release or for ctx.
// One larger than the limit is let in alone. So what the tier and its
// incoming values take together stays within the capacity, and many
// connections announcing large values wait their turn instead of each
// allocating its own. A value reserved as its bytes arrive is admitted by
// its first step's Reserve and grows with Grow.
func (m *Memory) Reserve(ctx context.Context, n int64) (release func(), err error) {
	for {
		m.resMu.Lock()
		if m.reserved == 0 || m.reserved+n <= m.resLimit {
			m.reserved += n
			m.resMu.Unlock()
			break
		}
		wait := m.resReleased
		m.resMu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, fmt.Errorf("memory tier: waiting for %d bytes of room: %w", n, ctx.Err())
		}
	}
	return m.holdReserved(n), nil
}

// Grow reserves n more bytes for a value Reserve admitted, without
// waiting: its own earlier steps count toward the limit, so waiting for
// room would wait for itself (a value over the limit could never finish
// arriving). Other values wait in Reserve until it is given back.
func (m *Memory) Grow(n int64) (release func()) {
	m.resMu.Lock()
	m.reserved += n
	m.resMu.Unlock()
	return m.holdReserved(n)
}

// holdReserved counts n reserved bytes against the capacity and returns
// their release.
func (m *Memory) holdReserved(n int64) (release func()) {
	m.hold(n)
	m.shrink()
	var once sync.Once
	return func() {
		once.Do(func() {
			m.hold(-n)
			m.resMu.Lock()
			m.reserved -= n
			close(m.resReleased)
			m.resReleased = make(chan struct{})
			m.resMu.Unlock()
		})
	}
}

// Delete removes key; it reports whether it was stored.
func (m *Memory) Delete(key string) bool {
	s := m.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := m.lookup(s, key)
	if ok {
		s.remove(e)
	}
	return ok
}

// Expires returns key's expiry in Unix nanoseconds (0: never); ok is
// false when key is absent or expired.
func (m *Memory) Expires(key string) (at int64, ok bool) {
	s := m.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := m.lookup(s, key)
	if !ok {
		return 0, false
	}
	return e.obj.Expires, true
}

// SetExpires changes key's expiry to at (Unix nanoseconds; 0: never); an
// at not after now deletes key. It reports whether key was stored. The
// stored object is replaced by a copy, so readers holding it see no
// change.
func (m *Memory) SetExpires(key string, at int64) bool {
	s := m.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := m.lookup(s, key)
	if !ok {
		return false
	}
	if at != 0 && at <= m.now() {
		s.remove(e)
		return true
	}
	c := *e.obj
	c.Expires = at
	e.obj = &c
	return true
}

// Observe installs fn (see Observer), replacing any earlier one; nil
// removes it. Install it before the tier is used, or changes before it go
// unseen.
func (m *Memory) Observe(fn Observer) {
	for _, s := range m.shards {
		s.mu.Lock()
		s.observe = fn
		s.mu.Unlock()
	}
}

// setDemote installs the Tiered's hook for objects leaving for the
// write-behind queue.
func (m *Memory) setDemote(fn Observer) {
	for _, s := range m.shards {
		s.mu.Lock()
		s.demote = fn
		s.mu.Unlock()
	}
}

// Present reports whether key is stored and unexpired. Unlike Contains it
// never reclaims anything, so an Observer's reader may call it freely.
func (m *Memory) Present(key string) bool {
	now := m.now()
	s := m.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.present(key, now)
}

// Range calls fn for every stored unexpired key, one shard locked at a
// time: fn must not call into the tier. Keys changed while it runs may or
// may not be seen.
func (m *Memory) Range(fn func(key string)) {
	now := m.now()
	for _, s := range m.shards {
		s.mu.Lock()
		s.each(now, fn)
		s.mu.Unlock()
	}
}

// Stats returns the current counters.
func (m *Memory) Stats() Stats {
	st := Stats{Hits: m.hits.Load(), Misses: m.misses.Load(), Evictions: m.evictions.Load(), Rejected: m.rejected.Load(), Expired: m.expired.Load()}
	for _, s := range m.shards {
		s.mu.Lock()
		st.Objects += int64(len(s.items))
		st.Bytes += s.bytes
		st.Capacity += s.capacity
		s.mu.Unlock()
	}
	return st
}

// Tiers returns the memory tier's counters, named as Tiered.Tiers names
// them: servers report either store the same way.
func (m *Memory) Tiers() []TierStats { return []TierStats{{"memory", m.Stats()}} }

// shard is one lock's worth of the tier: an S3-FIFO cache with a
// sixteenth of the capacity. Its hooks (observe, demote) run with mu held.
type shard struct {
	mu sync.Mutex
	s3fifo
}

func newShard(capacity int64) *shard { return &shard{s3fifo: newS3FIFO(capacity)} }
