package tokenizer

import (
	"sync"
	"unsafe"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// entryOverhead is what one cached answer costs beyond its token ids: the
// key, the slice header, the LRU's list element and its map slot (about
// 130 bytes on amd64, TestCacheEntryCost; rounded up).
const entryOverhead = 160

// cache is the tokenizer's LRU of token ids by request hash, bounded both
// by entries and by bytes: each entry is charged entryOverhead plus the
// capacity of its id slice, and the least recently used entries go until
// both bounds hold. An answer larger than the whole byte budget is not
// cached. Safe for concurrent use.
type cache struct {
	mu       sync.Mutex
	lru      *simplelru.LRU[uint64, []uint32]
	bytes    int64 // charged for the entries held
	maxBytes int64
}

func newCache(maxEntries int, maxBytes int64) (*cache, error) {
	c := &cache{maxBytes: maxBytes}
	l, err := simplelru.NewLRU[uint64, []uint32](maxEntries, func(_ uint64, ids []uint32) {
		c.bytes -= entryCost(ids) // called with mu held, from Add or RemoveOldest
	})
	if err != nil {
		return nil, err
	}
	c.lru = l
	return c, nil
}

// entryCost is the bytes an entry of ids is charged.
func entryCost(ids []uint32) int64 {
	return entryOverhead + int64(cap(ids))*int64(unsafe.Sizeof(uint32(0)))
}

func (c *cache) get(key uint64) ([]uint32, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Get(key)
}

// has says key is cached, without making it recently used.
func (c *cache) has(key uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Contains(key)
}

// add caches ids under key, evicting the least recently used entries until
// the byte budget holds. ids must have no spare capacity worth keeping
// (the caller clips them): the capacity is charged.
func (c *cache) add(key uint64, ids []uint32) {
	cost := entryCost(ids)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lru.Remove(key) // the eviction callback uncharges an older answer
	if cost > c.maxBytes {
		return
	}
	c.lru.Add(key, ids) // may evict the oldest by count, uncharged likewise
	c.bytes += cost
	for c.bytes > c.maxBytes {
		if _, _, ok := c.lru.RemoveOldest(); !ok {
			break
		}
	}
}

// size returns the entries held and the bytes they are charged.
func (c *cache) size() (entries int, bytes int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len(), c.bytes
}
