package kvredis

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/warmpath/warmpath/libs/testredis"
	"github.com/warmpath/warmpath/libs/testwait"
	"github.com/warmpath/warmpath/services/router/kvindex"
)

func client(t *testing.T, url string) redis.UniversalClient {
	t.Helper()
	rdb, err := NewClient(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

func keyRange(from, n uint64) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = from + uint64(i)
	}
	return out
}

func remove(tier kvindex.Tier, keys ...uint64) kvindex.Op {
	return kvindex.Op{Kind: kvindex.OpRemove, Tier: tier, Keys: keys}
}

// The worker's set holds exactly the blocks it still has, in any tier.
func TestRemovalsLeaveTheWorkerSet(t *testing.T) {
	for _, tc := range []struct {
		name string
		ops  [][]kvindex.Op // one batch each
		want int64
	}{
		{"removed", [][]kvindex.Op{{add(kvindex.GPU, keyRange(1, 100)...)}, {remove(kvindex.GPU, keyRange(1, 60)...)}}, 40},
		{"all removed", [][]kvindex.Op{{add(kvindex.GPU, 1, 2)}, {remove(kvindex.GPU, 1, 2)}}, 0},
		{"another tier keeps it", [][]kvindex.Op{{add(kvindex.GPU, 1, 2), add(kvindex.CPU, 2)}, {remove(kvindex.GPU, 1, 2)}}, 1},
		{"two copies", [][]kvindex.Op{{add(kvindex.GPU, 1), add(kvindex.GPU, 1)}, {remove(kvindex.GPU, 1)}}, 1},
		{"tier cleared", [][]kvindex.Op{{add(kvindex.GPU, 1, 2), add(kvindex.CPU, 2)}, {{Kind: kvindex.OpClear, Tier: kvindex.GPU}}}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, rdb := newStore(t)
			for i, ops := range tc.ops {
				if err := s.Commit(&kvindex.Change{Worker: "w", Seq: uint64(i), Hash: uint64(i), Ops: ops}); err != nil {
					t.Fatal(err)
				}
			}
			if n := rdb.SCard(context.Background(), s.own("w").keys[2]).Val(); n != tc.want {
				t.Fatalf("w:w holds %d members, want %d", n, tc.want)
			}
		})
	}
}

// Clearing a worker of 100k blocks never runs one long command: Redis
// answers everybody else meanwhile.
func TestClearIsChunked(t *testing.T) {
	const blocks, batch = 100_000, 1000
	for _, tc := range []struct {
		name  string
		clear func(s *Store) error
		left  int64 // members of w:w afterwards
	}{
		{"restart", func(s *Store) error {
			return s.Commit(&kvindex.Change{Worker: "w", Seq: 0, Hash: 99, Reset: true, Ops: []kvindex.Op{add(kvindex.GPU, 1<<40)}})
		}, 1},
		{"cache reset", func(s *Store) error {
			return s.Commit(&kvindex.Change{Worker: "w", Seq: blocks / batch, Hash: 1, Ops: []kvindex.Op{{Kind: kvindex.OpClear, Tier: kvindex.GPU}}})
		}, 0},
		{"forget", func(s *Store) error { return s.Forget("w") }, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, rdb := newStore(t)
			ctx := context.Background()
			for i := range uint64(blocks / batch) {
				if err := s.Commit(&kvindex.Change{Worker: "w", Seq: i, Hash: 1, Ops: []kvindex.Op{add(kvindex.GPU, keyRange(i*batch+1, batch)...)}}); err != nil {
					t.Fatal(err)
				}
			}
			if n := rdb.SCard(ctx, s.own("w").keys[2]).Val(); n != blocks {
				t.Fatalf("w:w holds %d members before the clear, want %d", n, blocks)
			}
			// Counted in script calls, not timed: each call touches at most
			// ChunkSize (500) keys, so clearing 100k blocks takes at least 200
			// calls, each a few ms (the whole-set script it replaced took
			// seconds, during which Redis answered nobody).
			before := scriptCalls(t, rdb)
			if err := tc.clear(s); err != nil {
				t.Fatal(err)
			}
			if calls := scriptCalls(t, rdb) - before; calls < blocks/500 {
				t.Fatalf("the clear ran %d scripts for %d blocks; want at least %d, of at most 500 keys each", calls, blocks, blocks/500)
			}
			if n := rdb.SCard(ctx, s.own("w").keys[2]).Val(); n != tc.left {
				t.Fatalf("w:w holds %d members after the clear, want %d", n, tc.left)
			}
			if m, err := s.LookupShared(keyRange(1, 3), []string{"w"}, nil); err != nil || m[0].Any != 0 {
				t.Fatalf("cleared blocks still match: %+v %v", m, err)
			}
			// the dead fields are gone too, not only unreachable
			if f := rdb.HGetAll(ctx, s.own("w").bprefix+"1").Val(); len(f) != 0 {
				t.Fatalf("block 1 keeps fields %v", f)
			}
		})
	}
}

// hung accepts connections and never answers, like a stopped Redis.
func hung(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return "redis://" + ln.Addr().String() + "/0"
}

// A hung Redis costs the first calls their timeout; then the breaker
// opens, lookups answer at once from the local index, and the state is
// exported.
func TestBreakerFailsFastOnHungRedis(t *testing.T) {
	s := New(client(t, hung(t)), Config{Timeout: 50 * time.Millisecond, BreakerFailures: 3, BreakerOpen: time.Hour})
	keys := []uint64{1, 2, 3}
	if err := s.Commit(&kvindex.Change{Worker: "w", Ops: []kvindex.Op{add(kvindex.GPU, keys...)}}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("commit to a hung Redis: %v", err)
	}
	testwait.For(t, 10*time.Second, "the breaker to open", func() bool {
		s.Lookup(keys, []string{"w"}, nil)
		return !s.g.usable()
	})
	if v := testutil.ToFloat64(s.g.open); v != 1 {
		t.Fatalf("breaker gauge %v while open", v)
	}
	for range 50 {
		start := time.Now()
		m := s.Lookup(keys, []string{"w", "other"}, nil)
		if d := time.Since(start); d > 10*time.Millisecond {
			t.Fatalf("lookup took %v with the breaker open", d)
		}
		if m[0] != (kvindex.Match{GPU: 3, Local: 3, Any: 3}) || m[1] != (kvindex.Match{}) {
			t.Fatalf("lookup %+v, want the local index's view", m)
		}
		start = time.Now()
		if _, err := s.LookupShared(keys, []string{"w"}, nil); !errors.Is(err, ErrUnavailable) || time.Since(start) > 10*time.Millisecond {
			t.Fatalf("shared lookup: %v after %v", err, time.Since(start))
		}
	}
	start := time.Now()
	if err := s.Commit(&kvindex.Change{Worker: "w", Seq: 1, Ops: []kvindex.Op{add(kvindex.GPU, 4)}}); !errors.Is(err, ErrUnavailable) || time.Since(start) > 10*time.Millisecond {
		t.Fatalf("commit with the breaker open: %v after %v", err, time.Since(start))
	}
}

// syncBuffer is a log sink safe for the handler's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Lookup errors are counted per op and logged, once per LogEvery.
func TestLookupErrorsCountedAndLogged(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens: every call is refused
	var logs syncBuffer
	s := New(client(t, "redis://"+addr+"/0"), Config{BreakerFailures: 1000, Log: slog.New(slog.NewTextHandler(&logs, nil)), LogEvery: time.Hour})
	for range 10 {
		s.Lookup([]uint64{1}, []string{"w"}, nil)
	}
	if n := testutil.ToFloat64(s.g.errs.WithLabelValues(opLookup)); n != 10 {
		t.Fatalf("lookup errors counted %v, want 10", n)
	}
	if n := testutil.ToFloat64(s.g.errs.WithLabelValues(opCommit)); n != 0 {
		t.Fatalf("commit errors counted %v, want 0", n)
	}
	if n := strings.Count(logs.String(), "kv redis: call failed"); n != 1 {
		t.Fatalf("%d log lines for 10 errors within LogEvery, want 1:\n%s", n, logs.String())
	}
}

// proxy forwards TCP to a Redis until cut, which drops every connection
// and refuses new ones until restored.
type proxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	down   bool
	conns  []net.Conn
}

func newProxy(t *testing.T, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target}
	go p.serve()
	t.Cleanup(func() {
		_ = ln.Close()
		p.cut(true)
	})
	return p
}

func (p *proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.down {
			p.mu.Unlock()
			_ = c.Close()
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			p.mu.Unlock()
			_ = c.Close()
			continue
		}
		p.conns = append(p.conns, c, up)
		p.mu.Unlock()
		go func() { _, _ = io.Copy(up, c); _ = up.Close() }()
		go func() { _, _ = io.Copy(c, up); _ = c.Close() }()
	}
}

func (p *proxy) cut(down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = down
	if down {
		for _, c := range p.conns {
			_ = c.Close()
		}
		p.conns = nil
	}
}

// A batch Redis did not take is not lost: the worker is served from the
// local index meanwhile, and its next batch rewrites it in Redis.
func TestFailedCommitResyncsTheWorker(t *testing.T) {
	url := testredis.Start(t)
	opts, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	p := newProxy(t, opts.Addr)
	s := New(client(t, "redis://"+p.ln.Addr().String()+"/0"), Config{Timeout: 100 * time.Millisecond, BreakerFailures: 1, BreakerOpen: 20 * time.Millisecond})
	other := New(client(t, url), Config{}) // a replica that reads Redis only
	rdb := client(t, url)

	if err := s.Commit(&kvindex.Change{Worker: "w", Seq: 0, Hash: 1, Ops: []kvindex.Op{add(kvindex.GPU, 1, 2)}}); err != nil {
		t.Fatal(err)
	}
	p.cut(true)
	lost := &kvindex.Change{Worker: "w", Seq: 1, Hash: 2, Ops: []kvindex.Op{add(kvindex.GPU, 3), remove(kvindex.GPU, 1)}}
	if err := s.Commit(lost); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("commit through a cut connection: %v", err)
	}
	// Meanwhile this replica routes on what it knows.
	if m := s.Lookup([]uint64{2, 3}, []string{"w"}, nil); m[0].GPU != 2 {
		t.Fatalf("dirty worker's lookup %+v, want the local view", m)
	}
	p.cut(false)
	testwait.For(t, 10*time.Second, "the breaker to let a probe through", s.g.usable)
	if err := s.Commit(&kvindex.Change{Worker: "w", Seq: 2, Hash: 3, Ops: []kvindex.Op{add(kvindex.GPU, 4)}}); err != nil {
		t.Fatalf("commit after Redis came back: %v", err)
	}
	for _, tc := range []struct {
		keys []uint64
		want int
	}{{[]uint64{2, 3, 4}, 3}, {[]uint64{1}, 0}} {
		if m, err := other.LookupShared(tc.keys, []string{"w"}, nil); err != nil || m[0].GPU != tc.want {
			t.Fatalf("another replica sees %v as %+v (%v), want %d blocks", tc.keys, m, err, tc.want)
		}
	}
	if n := rdb.SCard(context.Background(), s.own("w").keys[2]).Val(); n != 3 {
		t.Fatalf("w:w holds %d members after the resync, want 3", n)
	}
	if s.flag(s.dirty, "w") {
		t.Fatal("the worker is still dirty after a resync")
	}
	// Later batches apply normally, once.
	if err := s.Commit(&kvindex.Change{Worker: "w", Seq: 3, Hash: 4, Ops: []kvindex.Op{remove(kvindex.GPU, 4)}}); err != nil {
		t.Fatal(err)
	}
	if m, _ := other.LookupShared([]uint64{2, 3, 4}, []string{"w"}, nil); m[0].GPU != 2 {
		t.Fatalf("after a later removal: %+v", m)
	}
}

// scriptCalls is how many scripts Redis has run (EVAL and EVALSHA).
func scriptCalls(t *testing.T, rdb *redis.Client) int {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || (name != "cmdstat_evalsha" && name != "cmdstat_eval") {
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
		c, err := strconv.Atoi(calls)
		if err != nil {
			t.Fatalf("commandstats line %q: %v", line, err)
		}
		n += c
	}
	return n
}

// A Redis (or a cluster master) that comes back empty has lost workers
// whose batches all applied: nothing marked them for resync. The next
// batch finds its worker's batch mark gone where this replica had
// written one, and rewrites the worker from the local index.
func TestEmptiedRedisRewritesTheWorker(t *testing.T) {
	for _, tc := range []struct {
		name string
		ops  []kvindex.Op // the batch before the loss
		keys []uint64     // looked up afterwards
		want kvindex.Match
	}{
		{"own part", []kvindex.Op{add(kvindex.GPU, 1, 2, 3)}, []uint64{1, 2, 3, 4}, kvindex.Match{GPU: 4, Local: 4, Any: 4}},
		{"l2 part", []kvindex.Op{add(kvindex.GPU, 1), add(kvindex.L2, 2, 3)}, []uint64{1, 2, 3, 4}, kvindex.Match{GPU: 1, Local: 1, Any: 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, rdb := newStore(t)
			reader := New(rdb, Config{})
			if err := s.Commit(&kvindex.Change{Worker: "w", Seq: 0, Hash: 1, Ops: tc.ops}); err != nil {
				t.Fatal(err)
			}
			if err := rdb.FlushAll(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
			// block 4 on the GPU: the own part's batch mark is checked on
			// every batch
			if err := s.Commit(&kvindex.Change{Worker: "w", Seq: 1, Hash: 2, Ops: []kvindex.Op{add(kvindex.GPU, 4)}}); err != nil {
				t.Fatal(err)
			}
			got, err := reader.LookupShared(tc.keys, []string{"w"}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got[0] != tc.want {
				t.Fatalf("after Redis lost everything and one more batch: %+v, want %+v", got[0], tc.want)
			}
		})
	}
}
