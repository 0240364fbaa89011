// Package store is the cache server's storage: a memory tier (Memory), a
// disk tier (Disk), and the two joined (Tiered), memory evicting to disk.
//
// The memory tier is a byte-bounded, sharded map from key to immutable
// object with S3-FIFO eviction (Yang et al., SOSP '23), which keeps a
// working set resident through scans of one-time keys — the pattern of a
// long document read once by one worker.
//
// Capacity counts each object's key, value and a fixed per-entry overhead,
// so the bound holds for small objects too. Values are never copied on
// Get: an object is immutable once stored, and a replacement is a new
// object.
//
// Objects may carry an expiry (Object.Expires). An expired object is a miss
// in every tier and is reclaimed lazily: when a read finds it, when
// eviction reaches it (it then leaves without being written behind), and,
// on disk, when the tier is opened.
//
// The package declares no interface over its tiers: each server declares
// the few methods it uses (Go's consumer-side interfaces), which *Memory
// and *Tiered both have.
package store

import "github.com/warmpath/warmpath/libs/lmproto"

// EntryOverhead approximates the bytes one entry costs beyond its key and
// value (map slot, list element, object header).
const EntryOverhead = 160

// Object is one stored value and the LMCache metadata that came with it.
type Object struct {
	Value []byte
	Meta  lmproto.Meta
	// Expires is when the object stops being served, in Unix nanoseconds
	// (8 bytes per object rather than a time.Time's 24); 0: never.
	Expires int64
}

// expired reports whether o has expired at now (Unix nanoseconds).
func (o *Object) expired(now int64) bool { return o.Expires != 0 && now >= o.Expires }

// size is what o costs a tier's capacity when stored under key.
func (o *Object) size(key string) int64 {
	return int64(len(key) + len(o.Value) + EntryOverhead)
}

// Stats are one tier's counters.
type Stats struct {
	Objects, Bytes, Capacity int64
	Hits, Misses, Evictions  uint64
	Rejected                 uint64 // objects larger than a shard
	Expired                  uint64 // objects reclaimed after their expiry
}

// TierStats names one tier's counters.
type TierStats struct {
	Name string
	Stats
}
