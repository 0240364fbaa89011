// Package kvredis keeps the kvaware index in Redis, so several router
// replicas route on one shared index (and one set of predictions is not
// needed: each replica's own still apply). Every replica subscribes to
// every worker and commits the same batches; a Lua script applies each
// batch once, keyed by the worker's sequence number and the batch's hash.
//
// Layout, under a prefix (default "warmpath:kv:"):
//
//	b:<key>         hash  "<worker>|<tier>|<gen>" -> copies   one per block key
//	w:<worker>      set   block keys holding a field of the worker
//	gen:<worker>    hash  tier -> current generation
//	seq:<worker>    "<seq>:<hash>" of the last batch applied
//	reset:<worker>  "<seq>:<hash>" of the batch that last reset the worker
//
// Clearing a worker (a restart, a cache reset, a departure) bumps its
// generation, which kills its entries at once in O(1): lookups count only
// fields of the current generation. The dead fields are then removed in
// chunks of ChunkSize keys, each one short script, so Redis never stalls
// on a worker with millions of blocks. A removal drops the key from
// w:<worker> once the worker holds no copy of it, so the set is exactly
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
// from the local index (resync) instead of applying the batch alone.
//
// Memory is bounded by Redis itself: run it with maxmemory and
// allkeys-lru, and every block key also expires after TTL without stores.
package kvredis

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/warmpath/warmpath/services/router/kvindex"
)

// Store is the Redis-backed index.
type Store struct {
	rdb    *redis.Client
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
}

// Config tunes a Store.
type Config struct {
	// Prefix of every key ("warmpath:kv:").
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

// NewClient returns a Redis client for url whose calls end at their
// context's deadline: go-redis otherwise waits out its own 3s read
// timeout, which would be added to a request while Redis hangs.
func NewClient(url string) (*redis.Client, error) {
	opts, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("kvredis: %w", err)
	}
	opts.ContextTimeoutEnabled = true
	return redis.NewClient(opts), nil
}

// New returns a store on rdb.
func New(rdb *redis.Client, cfg Config) *Store {
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
	}
}

func (s *Store) keys(worker string) []string {
	return []string{s.prefix + "seq:" + worker, s.prefix + "reset:" + worker, s.prefix + "w:" + worker, s.prefix + "gen:" + worker}
}

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
	if err != nil {
		s.setFlag(s.dirty, c.Worker, true)
		return fmt.Errorf("kvredis: commit %s seq %d (the worker will be resynced): %w", c.Worker, c.Seq, err)
	}
	if dead || s.flag(s.dead, c.Worker) {
		s.collectLater(c.Worker)
	}
	return nil
}

// commit applies c in Redis; dead reports entries left to collect.
func (s *Store) commit(c *kvindex.Change) (dead bool, err error) {
	reset := boolArg(c.Reset)
	if c.ResetOnly {
		reset = "only"
	}
	args := []any{mark(c), reset, s.prefix + "b:", c.Worker, int(s.ttl.Seconds())}
	for _, op := range c.Ops {
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
		res, err = commitScript.Run(ctx, s.rdb, s.keys(c.Worker), args...).Int64Slice()
		return err
	})
	return err == nil && len(res) == 2 && res[1] == 1, err
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
	s.mu.Unlock()
	keys := s.keys(worker)
	err := s.g.do(opForget, 4, func(ctx context.Context) error {
		return commitScript.Run(ctx, s.rdb, keys, "0:0", "only", s.prefix+"b:", worker, int(s.ttl.Seconds())).Err()
	})
	if err == nil {
		err = s.collect(worker)
	}
	if err == nil {
		err = s.g.do(opForget, 1, func(ctx context.Context) error {
			// gen last: were it gone with fields left, a later life of
			// the worker would start a new generation anyway (see gen).
			return s.rdb.Del(ctx, keys...).Err()
		})
	}
	if err != nil {
		return fmt.Errorf("kvredis: forget %s: %w", worker, err)
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

// LookupShared is Lookup from Redis alone. Its error wraps ErrUnavailable
// (Redis failed, or the breaker refused the call at once); out then
// matches nothing.
func (s *Store) LookupShared(keys []uint64, workers []string, out []kvindex.Match) ([]kvindex.Match, error) {
	out = out[:0]
	for range workers {
		out = append(out, kvindex.Match{})
	}
	if len(keys) == 0 {
		return out, nil
	}
	gens := make([]*redis.SliceCmd, len(workers))
	cmds := make([]*redis.MapStringStringCmd, len(keys))
	err := s.g.do(opLookup, 1, func(ctx context.Context) error {
		pipe := s.rdb.Pipeline()
		for i, w := range workers {
			gens[i] = pipe.HMGet(ctx, s.prefix+"gen:"+w, "0", "1", "2")
		}
		for i, k := range keys {
			cmds[i] = pipe.HGetAll(ctx, s.prefix+"b:"+strconv.FormatUint(k, 16))
		}
		_, err := pipe.Exec(ctx)
		return err
	})
	if err != nil {
		return out, fmt.Errorf("kvredis: lookup: %w", err)
	}
	pos := make(map[string]int, len(workers))
	cur := make([][kvindex.NumTiers]string, len(workers))
	for i, w := range workers {
		pos[w] = i
		for t, v := range gens[i].Val() {
			if g, ok := v.(string); ok && t < int(kvindex.NumTiers) {
				cur[i][t] = g
			}
		}
	}
	on := make([][3]bool, len(workers))
	for i := range on {
		on[i] = [3]bool{true, true, true}
	}
	tiers := make([]uint8, len(workers))
	for n, cmd := range cmds {
		fields, err := cmd.Result()
		if err != nil {
			return nil, fmt.Errorf("kvredis: lookup block %d: %w", n, err)
		}
		if len(fields) == 0 {
			break
		}
		clear(tiers)
		var l2 bool
		for f, v := range fields {
			if c, _ := strconv.Atoi(v); c <= 0 {
				continue
			}
			w, tier, gen, ok := parseField(f)
			if !ok {
				continue
			}
			if tier == kvindex.L2 {
				// the shared tier: any worker's live copy counts for all
				// (another worker's generation is not fetched: its dead
				// L2 fields count until collected, moments later)
				if p, ok := pos[w]; !ok || cur[p][tier] == gen {
					l2 = true
				}
			} else if p, ok := pos[w]; ok && cur[p][tier] == gen {
				tiers[p] |= 1 << tier
			}
		}
		live := false
		for i := range workers {
			gpu := tiers[i]&(1<<kvindex.GPU) != 0
			local := gpu || tiers[i]&(1<<kvindex.CPU) != 0
			if on[i][0] = on[i][0] && gpu; on[i][0] {
				out[i].GPU = n + 1
			}
			if on[i][1] = on[i][1] && local; on[i][1] {
				out[i].Local = n + 1
			}
			if on[i][2] = on[i][2] && (local || l2); on[i][2] {
				out[i].Any = n + 1
				live = true
			}
		}
		if !live {
			break
		}
	}
	return out, nil
}

// parseField splits "<worker>|<tier>|<gen>"; the worker (a URL) may hold
// '|', the tier and generation do not.
func parseField(f string) (worker string, tier kvindex.Tier, gen string, ok bool) {
	rest, gen, ok := cutLast(f)
	if !ok {
		return "", 0, "", false
	}
	worker, t, ok := cutLast(rest)
	if !ok {
		return "", 0, "", false
	}
	n, err := strconv.Atoi(t)
	if err != nil || n < 0 || n >= int(kvindex.NumTiers) {
		return "", 0, "", false
	}
	return worker, kvindex.Tier(n), gen, true
}

func cutLast(s string) (before, after string, ok bool) {
	i := strings.LastIndexByte(s, '|')
	if i < 0 {
		return "", "", false
	}
	return s[:i], s[i+1:], true
}

// Stats reports, per worker this replica has seen, the block keys it
// holds in Redis (all tiers, counted under GPU: Redis keeps no per-tier
// totals); this replica's own index's when Redis is unavailable.
func (s *Store) Stats() kvindex.Stats {
	s.mu.Lock()
	workers := slices.Collect(maps.Keys(s.workers))
	s.mu.Unlock()
	st := kvindex.Stats{Blocks: map[string][kvindex.NumTiers]int{}}
	cards := make([]*redis.IntCmd, len(workers))
	err := s.g.do(opStats, 4, func(ctx context.Context) error {
		pipe := s.rdb.Pipeline()
		for i, w := range workers {
			cards[i] = pipe.SCard(ctx, s.prefix+"w:"+w)
		}
		_, err := pipe.Exec(ctx)
		return err
	})
	if err != nil {
		return s.local.Stats()
	}
	for i, w := range workers {
		n := int(cards[i].Val())
		st.Blocks[w] = [kvindex.NumTiers]int{n, 0, 0}
		st.Keys += n
	}
	return st
}
