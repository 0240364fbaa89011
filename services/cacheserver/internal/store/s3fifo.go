package store

import "container/list"

// entry is one resident object, in either the small or the main queue.
type entry struct {
	key  string
	obj  *Object
	size int64
	freq uint8 // 0..3, bumped on hits
	main bool
	elem *list.Element
}

// s3fifo is S3-FIFO (Yang et al., SOSP '23) over a byte budget: a small
// and a main FIFO queue (new objects enter small; objects hit while there
// graduate to main; one-hit wonders leave from small) and the ghost queue
// of keys recently evicted from small (a returning ghost goes straight to
// main). It holds no lock, so the algorithm can be read, tested and
// replayed over a trace (hitsim_test.go) on its own; Memory gives each of
// its shards one, behind a mutex.
type s3fifo struct {
	capacity    int64
	bytes       int64
	smallBytes  int64
	items       map[string]*entry
	small, main *list.List
	ghost       map[string]*list.Element
	ghostList   *list.List
	// observe and demote are Memory.Observe's and the Tiered's hooks,
	// called in the middle of a change (see Observer).
	observe, demote Observer
}

func newS3FIFO(capacity int64) s3fifo {
	return s3fifo{capacity: capacity, items: map[string]*entry{}, small: list.New(), main: list.New(),
		ghost: map[string]*list.Element{}, ghostList: list.New()}
}

// lookup returns key's live entry, or nil; an expired one is removed, and
// reclaimed reports it. now is read only for an entry that has an expiry,
// so most reads cost no clock.
func (c *s3fifo) lookup(key string, now func() int64) (e *entry, reclaimed bool) {
	e, ok := c.items[key]
	if !ok {
		return nil, false
	}
	if e.obj.Expires != 0 && e.obj.expired(now()) {
		c.remove(e)
		return nil, true
	}
	return e, false
}

// hit counts a read of e toward keeping it.
func (c *s3fifo) hit(e *entry) {
	if e.freq < 3 {
		e.freq++
	}
}

// present reports whether key is stored and unexpired at now, changing
// nothing.
func (c *s3fifo) present(key string, now int64) bool {
	e, ok := c.items[key]
	return ok && !e.obj.expired(now)
}

// each calls fn for every key stored and unexpired at now.
func (c *s3fifo) each(now int64, fn func(key string)) {
	for k, e := range c.items {
		if !e.obj.expired(now) {
			fn(k)
		}
	}
}

// put inserts or replaces key and returns the entries evicted for space
// and how many expired entries eviction reclaimed on the way (now: Unix
// nanoseconds).
func (c *s3fifo) put(key string, obj *Object, size, now, room int64) ([]*entry, int) {
	if old, ok := c.items[key]; ok {
		c.remove(old)
	}
	e := &entry{key: key, obj: obj, size: size}
	if g, ok := c.ghost[key]; ok {
		c.ghostList.Remove(g)
		delete(c.ghost, key)
		e.main = true
		e.elem = c.main.PushFront(e)
	} else {
		e.elem = c.small.PushFront(e)
		c.smallBytes += size
	}
	c.items[key] = e
	c.bytes += size
	c.notify(key)
	return c.fit(room, now)
}

// fit evicts until the cache stores at most room bytes; it returns the
// entries evicted for space and how many expired entries it reclaimed.
func (c *s3fifo) fit(room, now int64) ([]*entry, int) {
	var evicted []*entry
	expired := 0
	for c.bytes > room && c.bytes > 0 {
		v := c.evict(now)
		switch {
		case v == nil:
		case v.obj.expired(now):
			expired++ // dead: not worth writing behind
		default:
			if c.demote != nil {
				// Marked before Memory lets its lock go: an observer
				// never sees the key in neither memory nor the
				// write-behind queue while it moves from one to the
				// other.
				c.demote(v.key)
			}
			evicted = append(evicted, v)
		}
	}
	return evicted, expired
}

// evict frees space per S3-FIFO: from small while it holds over 10% of the
// capacity, else from main. It returns the entry that left the cache, or
// nil when it only moved one between queues. An expired entry leaves
// whatever its frequency, and is not remembered as a ghost.
func (c *s3fifo) evict(now int64) *entry {
	if c.smallBytes > c.capacity/10 || c.main.Len() == 0 {
		back := c.small.Back()
		if back == nil {
			return c.evictMain(now)
		}
		e := back.Value.(*entry)
		c.small.Remove(back)
		c.smallBytes -= e.size
		if e.obj.expired(now) {
			c.drop(e)
			return e
		}
		if e.freq > 0 {
			// Hit while in small: worth keeping.
			e.freq, e.main = 0, true
			e.elem = c.main.PushFront(e)
			return nil
		}
		c.drop(e)
		c.addGhost(e.key)
		return e
	}
	return c.evictMain(now)
}

func (c *s3fifo) evictMain(now int64) *entry {
	for {
		back := c.main.Back()
		if back == nil {
			return nil
		}
		e := back.Value.(*entry)
		if e.freq > 0 && !e.obj.expired(now) {
			e.freq--
			c.main.MoveToFront(back)
			continue
		}
		c.main.Remove(back)
		c.drop(e)
		return e
	}
}

func (c *s3fifo) drop(e *entry) {
	delete(c.items, e.key)
	c.bytes -= e.size
	c.notify(e.key)
}

func (c *s3fifo) notify(key string) {
	if c.observe != nil {
		c.observe(key)
	}
}

// remove takes e out (a delete or a replacement).
func (c *s3fifo) remove(e *entry) {
	if e.main {
		c.main.Remove(e.elem)
	} else {
		c.small.Remove(e.elem)
		c.smallBytes -= e.size
	}
	c.drop(e)
}

// addGhost remembers a key evicted from small; the ghost queue holds as
// many keys as main holds objects, at least 64.
func (c *s3fifo) addGhost(key string) {
	c.ghost[key] = c.ghostList.PushFront(key)
	for c.ghostList.Len() > max(c.main.Len(), 64) {
		back := c.ghostList.Back()
		c.ghostList.Remove(back)
		delete(c.ghost, back.Value.(string))
	}
}
