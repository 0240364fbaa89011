// Package kvredis keeps the kvaware index in Redis, so several router
// replicas route on one shared index (and one set of predictions is not
// needed: each replica's own still apply). Every replica subscribes to
// every worker and commits the same batches; a Lua script applies each
// batch once, keyed by the worker's sequence number and the batch's hash.
//
// The store runs on one Redis or on a Redis Cluster (or Valkey's): every
// key carries a hash tag, and every script and multi-key command touches
// keys of one tag only, so of one slot. The index is split in parts, each
// under its own tag: one part per worker holds its GPU and CPU blocks
// (spread over the cluster's slots), and one part holds every worker's
// blocks in the shared L2 tier, which lookups credit to all workers alike.
// Layout, under a prefix P (default "warmpath:kv:") with no braces:
//
//	{Pw:<worker>}:b:<key>   hash  "|<tier>|<gen>" -> copies     the worker's part
//	{Pw:<worker>}:set       set   block keys holding a field
//	{Pw:<worker>}:gen       hash  tier -> current generation
//	{Pw:<worker>}:seq       "<seq>:<hash>" of the last batch applied
//	{Pw:<worker>}:reset     "<seq>:<hash>" of the batch that last reset it
//	{Pl2}:b:<key>           hash  "<worker>|2|<gen>" -> copies  the L2 part
//	{Pl2}:set:<worker>, {Pl2}:gen:<worker>, {Pl2}:seq:<worker>, {Pl2}:reset:<worker>
//
// A batch is committed to the worker's part, and to the L2 part when it
// touches the L2 tier or resets the worker; each part keeps its own batch
// mark, so a batch that reached one part and not the other still applies
// once in each.
//
// Clearing a worker (a restart, a cache reset, a departure) bumps its
// generation, which kills its entries at once in O(1): lookups count only
// fields of the current generation. The dead fields are then removed in
// chunks of ChunkSize keys, each one short script, so Redis never stalls
// on a worker with millions of blocks. A removal drops the key from the
// worker's set once the worker holds no copy of it, so the set is exactly
// the worker's live blocks (plus dead ones until collected).
//
// Failure model. Every Redis call runs under a deadline (Timeout) and one
// circuit breaker: after BreakerFailures failures in a row, calls fail at
// once for BreakerOpen, then one probe is let through. The store also
// keeps this replica's own in-memory index, fed by the same batches, and
// answers lookups from it whenever Redis fails or the breaker is open, so
// a lost Redis degrades routing to what a single replica knows instead of
// to load alone. A batch Redis did not take marks its worker dirty: the
// worker's shared entries are stale, so lookups take that worker's match
// from the local index, and the worker's next batch rewrites it in Redis
// from the local index (resync) instead of applying the batch alone; so
// does a batch that finds a batch mark this replica wrote gone (a Redis,
// or a cluster master, back without its data). On a
// cluster, a node that stops takes its slots' workers with it until it
// (or a replica promoted in its place) serves them again: the client
// follows MOVED and ASK redirects and reloads the slot map, and the
// breaker and resync above do the rest.
//
// Memory is bounded by Redis itself: run it with maxmemory and
// allkeys-lru, and every block key also expires after TTL without stores.
package kvredis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/warmpath/warmpath/services/router/kvindex"
)

// Store is the Redis-backed index.
type Store struct {
	rdb    redis.UniversalClient
	prefix string
	ttl    time.Duration
	chunk  int
	local  *kvindex.Index
	g      *guard

	mu      sync.Mutex
	workers map[string]bool // seen by this replica, for Stats
	// dirty workers lost a batch in Redis: their shared entries are stale
	// until a resync rewrites them.
	dirty map[string]bool
	// dead workers have dead entries (an older generation) to collect.
	dead map[string]bool
	// marked[w][p] says this replica wrote (or found) a batch mark in
	// part p of worker w: should the mark vanish, Redis lost the part.
	marked map[string][2]bool
}

// Config tunes a Store.
type Config struct {
	// Prefix of every key ("warmpath:kv:"). It goes inside each key's
	// hash tag, so it must hold no '{' or '}': those would move the tag.
	Prefix string
	// TTL of a block key without stores (1h).
	TTL time.Duration
	// Timeout of one Redis call (200ms): a slow Redis must not stall
	// routing. Commits and chunks get 4 times as long.
	Timeout time.Duration
	// BreakerFailures is how many calls in a row must fail to open the
	// breaker (5).
	BreakerFailures int
	// BreakerOpen is how long the open breaker fails calls at once before
	// it lets one probe through (5s).
	BreakerOpen time.Duration
	// ChunkSize is the most block keys one script touches when clearing
	// or rewriting a worker (500: about 1ms of Redis time each).
	ChunkSize int
	// Local is this replica's own index, fed by every batch, answering
	// lookups while Redis is unavailable and the source of resyncs; nil
	// makes one of 1<<22 keys.
	Local *kvindex.Index
	// Registerer, if set, exports the store's metrics.
	Registerer prometheus.Registerer
	// Log receives Redis failures, at most one line per op and LogEvery
	// (10s).
	Log      *slog.Logger
	LogEvery time.Duration
}

// New returns a store on rdb, one Redis or a cluster (NewClient).
func New(rdb redis.UniversalClient, cfg Config) *Store {
	if cfg.Prefix == "" {
		cfg.Prefix = "warmpath:kv:"
	}
	if cfg.TTL <= 0 {
		cfg.TTL = time.Hour
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 200 * time.Millisecond
	}
	if cfg.BreakerFailures <= 0 {
		cfg.BreakerFailures = 5
	}
	if cfg.BreakerOpen <= 0 {
		cfg.BreakerOpen = 5 * time.Second
	}
	if cfg.ChunkSize <= 0 {
		cfg.ChunkSize = 500
	}
	if cfg.Local == nil {
		cfg.Local = kvindex.New(1 << 22)
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.LogEvery <= 0 {
		cfg.LogEvery = 10 * time.Second
	}
	return &Store{
		rdb: rdb, prefix: cfg.Prefix, ttl: cfg.TTL, chunk: cfg.ChunkSize, local: cfg.Local, g: newGuard(cfg),
		workers: map[string]bool{}, dirty: map[string]bool{}, dead: map[string]bool{},
		marked: map[string][2]bool{},
	}
}

// part is the share of a worker's keys under one hash tag, so in one
// slot: the scripts take its four per-worker keys and write block keys
// under bprefix, with fields "<field>|<tier>|<gen>".
type part struct {
	keys    []string // seq, reset, set and gen keys of the worker
	bprefix string   // block keys
	field   string   // the worker as its fields name it
	gprefix string   // the gen key of a field's worker is gprefix+worker
	l2      bool     // the shared L2 part (else the worker's GPU and CPU)
}

// own is worker's own part: its GPU and CPU blocks, under a tag of its
// own, so workers spread over a cluster's slots. Its fields need not name
// the worker.
func (s *Store) own(worker string) part {
	tag := "{" + s.prefix + "w:" + worker + "}:"
	return part{
		keys:    []string{tag + "seq", tag + "reset", tag + "set", tag + "gen"},
		bprefix: tag + "b:", gprefix: tag + "gen",
	}
}

// shared is worker's share of the L2 part: every worker's L2 blocks under
// one tag, since a block stored by any worker counts for all, and a
// lookup reads it in one script.
func (s *Store) shared(worker string) part {
	tag := "{" + s.prefix + "l2}:"
	return part{
		keys:    []string{tag + "seq:" + worker, tag + "reset:" + worker, tag + "set:" + worker, tag + "gen:" + worker},
		bprefix: tag + "b:", field: worker, gprefix: tag + "gen:", l2: true,
	}
}

func (s *Store) parts(worker string) [2]part { return [2]part{s.own(worker), s.shared(worker)} }

// holds reports whether tier t's blocks live in p.
func (p part) holds(t kvindex.Tier) bool { return (t == kvindex.L2) == p.l2 }

func mark(c *kvindex.Change) string {
	return strconv.FormatUint(c.Seq, 10) + ":" + strconv.FormatUint(c.Hash, 16)
}

// Commit implements kvindex.Sink. The local index always takes the batch;
// an error says Redis did not, and the worker will be resynced.
func (s *Store) Commit(c *kvindex.Change) error {
	_ = s.local.Commit(c) // never fails
	s.mu.Lock()
	s.workers[c.Worker] = true
	dirty := s.dirty[c.Worker]
	s.mu.Unlock()
	if dirty && !c.ResetOnly {
		// A reset-only change carries no mark to resync under; the
		// worker's next batch does it.
		return s.resync(c)
	}
	dead, err := s.commit(c)
	if errors.Is(err, errLost) {
		// a Redis restarted empty (or a cluster master without its data):
		// the worker's earlier batches are gone, so rewrite it whole now
		s.setFlag(s.dirty, c.Worker, true)
		return s.resync(c)
	}
	if err != nil {
		s.setFlag(s.dirty, c.Worker, true)
		return fmt.Errorf("kvredis: commit %s seq %d (the worker will be resynced): %w", c.Worker, c.Seq, err)
	}
	if dead || s.flag(s.dead, c.Worker) {
		s.collectLater(c.Worker)
	}
	return nil
}

// commit applies c in Redis; dead reports entries left to collect. The
// worker's own part takes every batch (its mark stays current); the L2
// part only the batches that touch it.
func (s *Store) commit(c *kvindex.Change) (dead bool, err error) {
	for i, p := range s.parts(c.Worker) {
		if p.l2 && !c.Reset && !c.ResetOnly && !slices.ContainsFunc(c.Ops, func(op kvindex.Op) bool { return p.holds(op.Tier) }) {
			continue
		}
		d, err := s.commitPart(i, p, c)
		if err != nil {
			return dead, err
		}
		dead = dead || d
	}
	return dead, nil
}

// errLost says a part's batch mark, written before, is gone.
var errLost = errors.New("redis lost the worker's state")

func (s *Store) commitPart(i int, p part, c *kvindex.Change) (dead bool, err error) {
	reset := boolArg(c.Reset)
	if c.ResetOnly {
		reset = "only"
	}
	s.mu.Lock()
	expect := s.marked[c.Worker][i]
	s.mu.Unlock()
	args := []any{mark(c), reset, p.bprefix, p.field, int(s.ttl.Seconds()), boolArg(expect)}
	for _, op := range c.Ops {
		if !p.holds(op.Tier) {
			continue
		}
		kind := "a"
		switch op.Kind {
		case kvindex.OpRemove:
			kind = "r"
		case kvindex.OpClear:
			kind = "c"
		}
		args = append(args, kind, int(op.Tier), len(op.Keys))
		for _, k := range op.Keys {
			args = append(args, strconv.FormatUint(k, 16))
		}
	}
	var res []int64
	err = s.g.do(opCommit, 4, func(ctx context.Context) error {
		var err error
		res, err = commitScript.Run(ctx, s.rdb, p.keys, args...).Int64Slice()
		return err
	})
	if err != nil {
		return false, err
	}
	if len(res) == 2 && res[0] == 2 {
		return false, errLost
	}
	s.setMarked(c.Worker, i, !c.ResetOnly)
	return len(res) == 2 && res[1] == 1, nil
}

// setMarked records whether part i of worker holds a batch mark of ours.
func (s *Store) setMarked(worker string, i int, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.marked[worker]
	m[i] = on
	s.marked[worker] = m
}

// collectLater collects c's worker's dead entries; a failure leaves them
// for the worker's next batch (they are dead already: only memory waits).
func (s *Store) collectLater(worker string) {
	s.setFlag(s.dead, worker, true)
	if err := s.collect(worker); err == nil {
		s.setFlag(s.dead, worker, false)
	}
}

func boolArg(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

func (s *Store) flag(m map[string]bool, worker string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return m[worker]
}

func (s *Store) setFlag(m map[string]bool, worker string, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if on {
		m[worker] = true
	} else {
		delete(m, worker)
	}
}

// Forget drops everything worker holds (it left the pool): its entries die
// at once (a new generation), are collected in chunks, and its keys go.
func (s *Store) Forget(worker string) error {
	_ = s.local.Forget(worker)
	s.mu.Lock()
	delete(s.workers, worker)
	delete(s.dirty, worker)
	delete(s.dead, worker)
	delete(s.marked, worker)
	s.mu.Unlock()
	for _, p := range s.parts(worker) {
		err := s.g.do(opForget, 4, func(ctx context.Context) error {
			return commitScript.Run(ctx, s.rdb, p.keys, "0:0", "only", p.bprefix, p.field, int(s.ttl.Seconds()), "0").Err()
		})
		if err == nil {
			err = s.collectPart(worker, p)
		}
		if err == nil {
			err = s.g.do(opForget, 1, func(ctx context.Context) error {
				// gen last: were it gone with fields left, a later life of
				// the worker would start a new generation anyway (see gen).
				// One part's keys share a slot, so one DEL takes them.
				return s.rdb.Del(ctx, p.keys...).Err()
			})
		}
		if err != nil {
			return fmt.Errorf("kvredis: forget %s: %w", worker, err)
		}
	}
	return nil
}

// Lookup implements the kvaware lookup: one pipelined round trip to Redis
// for all the prompt's blocks. When Redis fails or the breaker is open,
// and for workers whose shared entries are stale (dirty), the match comes
// from this replica's own index.
func (s *Store) Lookup(keys []uint64, workers []string, out []kvindex.Match) []kvindex.Match {
	out, err := s.LookupShared(keys, workers, out)
	if err != nil {
		return s.local.Lookup(keys, workers, out)
	}
	s.mu.Lock()
	anyDirty := len(s.dirty) > 0
	s.mu.Unlock()
	if !anyDirty || len(keys) == 0 {
		return out
	}
	own := s.local.Lookup(keys, workers, nil)
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, w := range workers {
		if s.dirty[w] {
			out[i] = own[i]
		}
	}
	return out
}

// Stats reports, per worker this replica has seen, the block keys it
// holds in Redis: its own part's (GPU and CPU: Redis keeps no per-tier
// totals) counted under GPU, its L2 part's under L2; this replica's own
// index's when Redis is unavailable.
func (s *Store) Stats() kvindex.Stats {
	s.mu.Lock()
	workers := slices.Collect(maps.Keys(s.workers))
	s.mu.Unlock()
	st := kvindex.Stats{Blocks: map[string][kvindex.NumTiers]int{}}
	cards := make([][2]*redis.IntCmd, len(workers))
	err := s.g.do(opStats, 4, func(ctx context.Context) error {
		pipe := s.rdb.Pipeline()
		for i, w := range workers {
			for j, p := range s.parts(w) {
				cards[i][j] = pipe.SCard(ctx, p.keys[2])
			}
		}
		_, err := pipe.Exec(ctx)
		return err
	})
	if err != nil {
		return s.local.Stats()
	}
	for i, w := range workers {
		own, l2 := int(cards[i][0].Val()), int(cards[i][1].Val())
		st.Blocks[w] = [kvindex.NumTiers]int{own, 0, l2}
		st.Keys += own + l2
	}
	return st
}
