package l2events

import (
	"cmp"
	"context"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmpath/warmpath/libs/kvevents"
	"github.com/warmpath/warmpath/services/cacheserver/internal/store"
)

// Medium is the medium every event names: the shared L2, whichever of the
// server's tiers holds the chunk.
const Medium = "L2"

// TopicPrefix leads every topic; the model's name follows. A subscriber to
// the prefix gets every model and sees the publisher's seqs without gaps.
const TopicPrefix = "l2@"

// Source is the store whose keys are published: store.Memory or
// store.Tiered.
type Source interface {
	// Observe installs the hook told of every change (see store.Observer).
	Observe(fn store.Observer)
	// Present reports whether key is anywhere in the store, without side
	// effects.
	Present(key string) bool
	// Range calls fn for every present key (possibly more than once).
	Range(fn func(key string))
}

// Publisher sends batches: *kvzmq.Publisher.
type Publisher interface {
	PublishTopic(topic string, b kvevents.Batch) error
	Sequenced() uint64
}

// Counters are the tracker's metrics.
type Counters struct {
	Published, Dropped, Unparsed prometheus.Counter
}

// Config tunes a Tracker. Zero fields take the defaults.
type Config struct {
	// FlushInterval is how long changes gather before they are published
	// (default 5 ms): a store and an eviction of the same key within it
	// cost no event.
	FlushInterval time.Duration
	// MaxBatch bounds the events of one batch (default 512); this many
	// changed keys also cut the gathering short.
	MaxBatch int
	// MaxPending bounds the changed keys waiting to be published (default
	// 65536). Beyond it changes are dropped, counted, and the next pass
	// publishes AllBlocksCleared and rebuilds its view from the store.
	MaxPending int
	// MaxSnapshot bounds the hashes one snapshot returns (default
	// DefaultMaxSnapshot); a model holding more answers 507.
	MaxSnapshot int
}

// DefaultMaxSnapshot is the default Config.MaxSnapshot: about 1 M chunks, a
// 32 MiB copy and a 68 MiB response, far above what an L2 of a few hundred
// GiB of 1-2 MiB chunks holds per model.
const DefaultMaxSnapshot = 1 << 20

func (c Config) withDefaults() Config {
	if c.FlushInterval <= 0 {
		c.FlushInterval = 5 * time.Millisecond
	}
	if c.MaxBatch <= 0 {
		c.MaxBatch = 512
	}
	if c.MaxPending <= 0 {
		c.MaxPending = 1 << 16
	}
	if c.MaxSnapshot <= 0 {
		c.MaxSnapshot = DefaultMaxSnapshot
	}
	return c
}

// Tracker turns the store's changes into events. The store's hook only
// records which keys changed (a bounded set, so the data path never waits
// on the network or on a subscriber); Run's passes then ask the store
// whether each is present and publish what differs from the last pass. A
// key's events therefore follow its presence, not each operation: an
// overwrite, or a demotion from memory to disk, changes nothing and
// publishes nothing.
type Tracker struct {
	cfg Config
	src Source
	pub Publisher
	c   Counters
	log *slog.Logger

	// The queue: keys changed since the last pass. Observe takes qmu under
	// the store's locks, so nothing else is done while holding it.
	qmu      sync.Mutex
	dirty    map[string]Key
	overflow bool
	wake     chan struct{} // a change is waiting
	full     chan struct{} // MaxBatch changes are waiting

	// The view, guarded by mu: what the events published so far say the
	// store holds. Every publish happens with mu held (see Snapshot).
	mu      sync.Mutex
	present map[string]Key                   // data keys present
	models  map[string]map[[HashLen]byte]int // model -> hash -> present keys naming it
}

// New returns a tracker over src publishing to pub, and installs its hook
// on src: call it before src is used (and before a disk tier loads, so the
// objects it finds are published). log may be nil.
func New(cfg Config, src Source, pub Publisher, c Counters, log *slog.Logger) *Tracker {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	t := &Tracker{cfg: cfg.withDefaults(), src: src, pub: pub, c: c, log: log,
		dirty: map[string]Key{}, wake: make(chan struct{}, 1), full: make(chan struct{}, 1),
		present: map[string]Key{}, models: map[string]map[[HashLen]byte]int{}}
	src.Observe(t.observe)
	return t
}

// observe is the store's hook: it runs under the store's locks, so it only
// parses the key and queues it, never waiting.
func (t *Tracker) observe(key string) {
	k, data, err := ParseKey(key)
	if err != nil {
		t.c.Unparsed.Inc()
		return
	}
	if !data {
		return // the metadata half of a RESP pair; its kv_bytes key counts
	}
	t.qmu.Lock()
	switch _, queued := t.dirty[key]; {
	case t.overflow:
		t.c.Dropped.Inc() // the rebuild to come reads it from the store
	case !queued && len(t.dirty) >= t.cfg.MaxPending:
		t.c.Dropped.Add(float64(len(t.dirty) + 1))
		t.dirty, t.overflow = map[string]Key{}, true
	default:
		t.dirty[key] = k
	}
	n := len(t.dirty)
	t.qmu.Unlock()
	signal(t.wake)
	if n >= t.cfg.MaxBatch {
		signal(t.full)
	}
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// Run publishes changes until ctx ends, then publishes what is left.
func (t *Tracker) Run(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case <-ctx.Done():
			t.pass()
			return
		case <-t.wake:
		}
		// Gather for a moment: fewer, fuller batches, and a key stored
		// and dropped meanwhile costs nothing.
		timer.Reset(t.cfg.FlushInterval)
		select {
		case <-timer.C:
		case <-t.full:
			timer.Stop()
		case <-ctx.Done():
			timer.Stop()
		}
		t.pass()
	}
}

// pass publishes the changes queued since the last one.
func (t *Tracker) pass() {
	t.qmu.Lock()
	dirty, overflow := t.dirty, t.overflow
	t.dirty, t.overflow = map[string]Key{}, false
	t.qmu.Unlock()

	t.mu.Lock()
	defer t.mu.Unlock()
	if overflow {
		t.rebuild()
		return
	}
	events := map[string][]kvevents.Event{}
	for key, k := range dirty {
		// Asked now, after the change was queued: the answer is at least
		// as new as the change, and any later change is queued again.
		now := t.src.Present(key)
		if _, was := t.present[key]; now == was {
			continue
		}
		hashes := t.models[k.Model]
		if now {
			t.present[key] = k
			if hashes == nil {
				hashes = map[[HashLen]byte]int{}
				t.models[k.Model] = hashes
			}
			if hashes[k.Hash]++; hashes[k.Hash] == 1 {
				events[k.Model] = append(events[k.Model], stored(k.Hash))
			}
			continue
		}
		delete(t.present, key)
		if hashes[k.Hash]--; hashes[k.Hash] <= 0 {
			delete(hashes, k.Hash)
			if len(hashes) == 0 {
				delete(t.models, k.Model)
			}
			events[k.Model] = append(events[k.Model], removed(k.Hash))
		}
	}
	t.publish(events)
}

// rebuild replaces the view with what the store holds now, after changes
// were dropped, and tells every model's subscribers to resync: an
// AllBlocksCleared, after which they fetch a snapshot. Keys changing while
// the store is read were queued again and are settled by the next pass.
func (t *Tracker) rebuild() {
	events := map[string][]kvevents.Event{}
	for model := range t.models {
		events[model] = []kvevents.Event{kvevents.AllBlocksCleared{}}
	}
	t.present, t.models = map[string]Key{}, map[string]map[[HashLen]byte]int{}
	t.src.Range(func(key string) {
		k, data, err := ParseKey(key)
		if err != nil || !data {
			return
		}
		if _, dup := t.present[key]; dup {
			return
		}
		t.present[key] = k
		if t.models[k.Model] == nil {
			t.models[k.Model] = map[[HashLen]byte]int{}
		}
		t.models[k.Model][k.Hash]++
	})
	for model := range t.models {
		events[model] = []kvevents.Event{kvevents.AllBlocksCleared{}}
	}
	t.log.Warn("kv events: queue overflowed, published AllBlocksCleared", "models", len(events), "keys", len(t.present))
	t.publish(events)
}

// publish sends each model's events in batches of at most MaxBatch, models
// in name order. Call with mu held.
func (t *Tracker) publish(events map[string][]kvevents.Event) {
	ts := float64(time.Now().UnixNano()) / 1e9
	for _, model := range slices.SortedFunc(maps.Keys(events), cmp.Compare) {
		evs := events[model]
		for len(evs) > 0 {
			n := min(len(evs), t.cfg.MaxBatch)
			if err := t.pub.PublishTopic(TopicPrefix+model, kvevents.Batch{TS: ts, Events: evs[:n]}); err != nil {
				t.log.Warn("kv events: publish", "model", model, "err", err)
			} else {
				t.c.Published.Add(float64(n))
			}
			evs = evs[n:]
		}
	}
}

func stored(h [HashLen]byte) kvevents.Event {
	return kvevents.BlockStored{BlockHashes: []kvevents.BlockHash{kvevents.BytesHash(h[:])}, Medium: Medium}
}

func removed(h [HashLen]byte) kvevents.Event {
	return kvevents.BlockRemoved{BlockHashes: []kvevents.BlockHash{kvevents.BytesHash(h[:])}, Medium: Medium}
}
