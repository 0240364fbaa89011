package kvredis

import (
	"context"
	"maps"
	"slices"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/warmpath/warmpath/libs/testredis"
	"github.com/warmpath/warmpath/services/router/kvindex"
)

func newStore(t *testing.T) (*Store, *redis.Client) {
	t.Helper()
	opts, err := redis.ParseURL(testredis.Start(t))
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })
	return New(rdb, Config{}), rdb
}

func add(tier kvindex.Tier, keys ...uint64) kvindex.Op {
	return kvindex.Op{Kind: kvindex.OpAdd, Tier: tier, Keys: keys}
}

func TestCommitOncePerBatch(t *testing.T) {
	s, rdb := newStore(t)
	keys := []uint64{1, 2, 3}
	c0 := &kvindex.Change{Worker: "w", Seq: 0, Hash: 10, Ops: []kvindex.Op{add(kvindex.GPU, keys...)}}
	// Two replicas commit the same batch: it applies once.
	for range 2 {
		if err := s.Commit(c0); err != nil {
			t.Fatal(err)
		}
	}
	if f := rdb.HGetAll(context.Background(), s.own("w").bprefix+"1").Val(); len(f) != 1 || !slices.Contains(slices.Collect(maps.Values(f)), "1") {
		t.Fatalf("fields %v after the same batch twice, want one copy", f)
	}
	if m := s.Lookup(keys, []string{"w", "other"}, nil); m[0] != (kvindex.Match{GPU: 3, Local: 3, Any: 3}) || m[1] != (kvindex.Match{}) {
		t.Fatalf("lookup %+v", m)
	}
	// A replica behind the others skips what they applied.
	c1 := &kvindex.Change{Worker: "w", Seq: 1, Hash: 11, Ops: []kvindex.Op{{Kind: kvindex.OpRemove, Tier: kvindex.GPU, Keys: []uint64{3}}}}
	_ = s.Commit(c1)
	_ = s.Commit(c0)
	if m := s.Lookup(keys, []string{"w"}, nil); m[0].GPU != 2 {
		t.Fatalf("after the removal (and a stale replay of the add): %+v", m)
	}
	// CPU and the shared L2 tier.
	_ = s.Commit(&kvindex.Change{Worker: "w", Seq: 2, Hash: 12, Ops: []kvindex.Op{add(kvindex.CPU, 3), add(kvindex.L2, 4)}})
	if m := s.Lookup([]uint64{1, 2, 3, 4}, []string{"w", "other"}, nil); m[0] != (kvindex.Match{GPU: 2, Local: 3, Any: 4}) || m[1] != (kvindex.Match{Any: 0}) {
		t.Fatalf("tiers: %+v", m)
	}
}

func TestResetOnceAcrossReplicas(t *testing.T) {
	s, _ := newStore(t)
	_ = s.Commit(&kvindex.Change{Worker: "w", Seq: 7, Hash: 1, Ops: []kvindex.Op{add(kvindex.GPU, 1, 2)}})
	// The worker restarted: its first new batch resets it.
	reset := &kvindex.Change{Worker: "w", Seq: 0, Hash: 99, Reset: true, Ops: []kvindex.Op{add(kvindex.GPU, 5)}}
	_ = s.Commit(reset)
	_ = s.Commit(&kvindex.Change{Worker: "w", Seq: 1, Hash: 100, Ops: []kvindex.Op{add(kvindex.GPU, 6)}})
	// A second replica sees the same restart later: no second clear.
	_ = s.Commit(reset)
	if m := s.Lookup([]uint64{1}, []string{"w"}, nil); m[0].GPU != 0 {
		t.Fatal("the old process's blocks survived the reset")
	}
	if m := s.Lookup([]uint64{6}, []string{"w"}, nil); m[0].GPU != 1 {
		t.Fatal("a late replica's reset wiped the new process's blocks")
	}
	if err := s.Forget("w"); err != nil {
		t.Fatal(err)
	}
	if m := s.Lookup([]uint64{5}, []string{"w"}, nil); m[0].GPU != 0 {
		t.Fatal("blocks survived Forget")
	}
}
