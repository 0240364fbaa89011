// Package kvredis keeps the kvaware index in Redis, so several router
// replicas route on one shared index (and one set of predictions is not
// needed: each replica's own still apply). Every replica subscribes to
// every worker and commits the same batches; a Lua script applies each
// batch once, keyed by the worker's sequence number and the batch's hash.
//
// Layout, under a prefix (default "warmpath:kv:"):
//
//	b:<key>         hash  "<worker>|<tier>" -> copies       one per block key
//	w:<worker>      set   block keys the worker has held    for clears
//	seq:<worker>    "<seq>:<hash>" of the last batch applied
//	reset:<worker>  "<seq>:<hash>" of the batch that last reset the worker
//
// Memory is bounded by Redis itself: run it with maxmemory and
// allkeys-lru, and every block key also expires after TTL without stores.
package kvredis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/warmpath/warmpath/services/router/kvindex"
)

// Store is the Redis-backed index.
type Store struct {
	rdb     *redis.Client
	prefix  string
	ttl     time.Duration
	timeout time.Duration

	mu      sync.Mutex
	workers map[string]bool // seen by this replica, for Stats
}

// Config tunes a Store.
type Config struct {
	// Prefix of every key ("warmpath:kv:").
	Prefix string
	// TTL of a block key without stores (1h).
	TTL time.Duration
	// Timeout of one Redis call (200ms): a slow Redis must not stall
	// routing; a lookup that times out routes without cache knowledge.
	Timeout time.Duration
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
	return &Store{rdb: rdb, prefix: cfg.Prefix, ttl: cfg.TTL, timeout: cfg.Timeout, workers: map[string]bool{}}
}

// commitScript applies one batch once across replicas.
//
// KEYS: seq, reset and set keys of the worker. ARGV: mark ("seq:hash"),
// reset flag, block-key prefix, worker, ttl seconds, then the ops as
// kind, tier, n, key1..keyn.
var commitScript = redis.NewScript(`
local mark, reset, bprefix, worker, ttl = ARGV[1], ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5])
if reset == 'only' then
  -- a restart seen before the new process's first batch: drop the old
  -- process and forget its sequence, so the new one's batches apply
  for _, k in ipairs(redis.call('SMEMBERS', KEYS[3])) do
    for t = 0, 2 do redis.call('HDEL', bprefix .. k, worker .. '|' .. t) end
  end
  redis.call('DEL', KEYS[3], KEYS[1])
  return 1
end
local seq = tonumber(string.match(mark, '^(%d+):'))
local cur = redis.call('GET', KEYS[1])
if reset == '1' and redis.call('GET', KEYS[2]) ~= mark then
  -- this replica is the first to see the restart: drop the old process
  for _, k in ipairs(redis.call('SMEMBERS', KEYS[3])) do
    for t = 0, 2 do redis.call('HDEL', bprefix .. k, worker .. '|' .. t) end
  end
  redis.call('DEL', KEYS[3])
  redis.call('SET', KEYS[2], mark)
else
  -- applied already, by this or another replica
  if cur == mark then return 0 end
  if cur then
    local cseq = tonumber(string.match(cur, '^(%d+):'))
    if cseq and cseq >= seq then return 0 end
  end
end
local i = 6
while i <= #ARGV do
  local kind, tier, n = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
  local field = worker .. '|' .. tier
  if kind == 'c' then
    for _, k in ipairs(redis.call('SMEMBERS', KEYS[3])) do redis.call('HDEL', bprefix .. k, field) end
  end
  for j = 1, n do
    local k = ARGV[i + 2 + j]
    if kind == 'a' then
      redis.call('HINCRBY', bprefix .. k, field, 1)
      redis.call('EXPIRE', bprefix .. k, ttl)
      redis.call('SADD', KEYS[3], k)
    elseif kind == 'r' then
      if redis.call('HINCRBY', bprefix .. k, field, -1) <= 0 then redis.call('HDEL', bprefix .. k, field) end
    end
  end
  i = i + 3 + n
end
redis.call('SET', KEYS[1], mark)
redis.call('EXPIRE', KEYS[3], ttl)
return 1
`)

func (s *Store) keys(worker string) []string {
	return []string{s.prefix + "seq:" + worker, s.prefix + "reset:" + worker, s.prefix + "w:" + worker}
}

// Commit implements kvindex.Sink.
func (s *Store) Commit(c *kvindex.Change) error {
	s.mu.Lock()
	s.workers[c.Worker] = true
	s.mu.Unlock()
	reset := boolArg(c.Reset)
	if c.ResetOnly {
		reset = "only"
	}
	args := []any{strconv.FormatUint(c.Seq, 10) + ":" + strconv.FormatUint(c.Hash, 16), reset, s.prefix + "b:", c.Worker, int(s.ttl.Seconds())}
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
	ctx, cancel := context.WithTimeout(context.Background(), 4*s.timeout)
	defer cancel()
	if err := commitScript.Run(ctx, s.rdb, s.keys(c.Worker), args...).Err(); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("kvredis: commit %s seq %d: %w", c.Worker, c.Seq, err)
	}
	return nil
}

func boolArg(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// Forget drops everything worker holds (it left the pool).
func (s *Store) Forget(worker string) error {
	s.mu.Lock()
	delete(s.workers, worker)
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 4*s.timeout)
	defer cancel()
	keys := s.keys(worker)
	members, err := s.rdb.SMembers(ctx, keys[2]).Result()
	if err != nil {
		return fmt.Errorf("kvredis: forget %s: %w", worker, err)
	}
	pipe := s.rdb.Pipeline()
	for _, k := range members {
		for t := kvindex.GPU; t < kvindex.NumTiers; t++ {
			pipe.HDel(ctx, s.prefix+"b:"+k, worker+"|"+strconv.Itoa(int(t)))
		}
	}
	pipe.Del(ctx, keys...)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("kvredis: forget %s: %w", worker, err)
	}
	return nil
}

// Lookup implements the kvaware lookup over Redis: one pipelined round trip
// for all the prompt's blocks. On error every worker matches nothing (the
// request is then routed on load alone).
func (s *Store) Lookup(keys []uint64, workers []string, out []kvindex.Match) []kvindex.Match {
	out = out[:0]
	for range workers {
		out = append(out, kvindex.Match{})
	}
	if len(keys) == 0 {
		return out
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.MapStringStringCmd, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.HGetAll(ctx, s.prefix+"b:"+strconv.FormatUint(k, 16))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return out
	}
	pos := make(map[string]int, len(workers))
	for i, w := range workers {
		pos[w] = i
	}
	on := make([][3]bool, len(workers))
	for i := range on {
		on[i] = [3]bool{true, true, true}
	}
	tiers := make([]uint8, len(workers))
	for n, cmd := range cmds {
		fields, err := cmd.Result()
		if err != nil || len(fields) == 0 {
			break
		}
		clear(tiers)
		var l2 bool
		for f, v := range fields {
			if c, _ := strconv.Atoi(v); c <= 0 {
				continue
			}
			w, t, ok := strings.Cut(f, "|")
			if !ok {
				continue
			}
			tier, err := strconv.Atoi(t)
			if err != nil || tier < 0 || tier >= int(kvindex.NumTiers) {
				continue
			}
			if kvindex.Tier(tier) == kvindex.L2 {
				l2 = true
			} else if p, ok := pos[w]; ok {
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
	return out
}

// Stats reports, per worker this replica has seen, the block keys it has
// held (all tiers, counted under GPU: Redis keeps no per-tier totals).
func (s *Store) Stats() kvindex.Stats {
	s.mu.Lock()
	workers := make([]string, 0, len(s.workers))
	for w := range s.workers {
		workers = append(workers, w)
	}
	s.mu.Unlock()
	st := kvindex.Stats{Blocks: map[string][kvindex.NumTiers]int{}}
	ctx, cancel := context.WithTimeout(context.Background(), 4*s.timeout)
	defer cancel()
	for _, w := range workers {
		n, err := s.rdb.SCard(ctx, s.prefix+"w:"+w).Result()
		if err != nil {
			continue
		}
		st.Blocks[w] = [kvindex.NumTiers]int{int(n), 0, 0}
		st.Keys += int(n)
	}
	return st
}
