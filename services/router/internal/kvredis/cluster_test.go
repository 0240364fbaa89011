package kvredis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/warmpath/warmpath/libs/testredis"
	"github.com/warmpath/warmpath/libs/testwait"
	"github.com/warmpath/warmpath/services/router/kvindex"
)

// clusterLoad is the batches of a few workers over shared prompt chains:
// GPU and CPU stores, removals of what they hold, and L2 stores that
// count for every worker.
type clusterLoad struct {
	workers []string
	seq     map[string]uint64
}

const loadChains, loadBlocks = 4, 12

func chainKey(c, n int) uint64 { return uint64(c)<<16 | uint64(n) }

func chainKeys(c int) []uint64 {
	out := make([]uint64, loadBlocks)
	for n := range out {
		out[n] = chainKey(c, n)
	}
	return out
}

// next is w's next batch.
func (l *clusterLoad) next(w string) *kvindex.Change {
	s := l.seq[w]
	l.seq[w]++
	c := int(s) % loadChains
	var gpu []uint64
	for n := range 4 + int(s)%4 {
		gpu = append(gpu, chainKey(c, n))
	}
	ops := []kvindex.Op{add(kvindex.GPU, gpu...), add(kvindex.CPU, chainKey((c+1)%loadChains, 0))}
	if s%3 == 2 {
		ops = append(ops, add(kvindex.L2, chainKey(c, 8), chainKey(c, 9), chainKey(c, 10)))
	}
	if s > 0 && s%4 == 0 {
		// batch s-1 stored blocks 0 and 1 of its chain on the GPU
		p := int(s-1) % loadChains
		ops = append(ops, remove(kvindex.GPU, chainKey(p, 0), chainKey(p, 1)))
	}
	return &kvindex.Change{Worker: w, Seq: s, Hash: s*31 + 7, Ops: ops}
}

// The shared index on a real three-master Redis Cluster: the workers'
// parts spread over every node, two replicas commit every batch once, a
// third reads the same matches as the replicas' own indexes. Then one
// master is killed mid-run: nothing panics or hangs, failures surface as
// ErrUnavailable and are counted, and lookups answer from the replica's
// own index. Once the node is back (same port, same directory), the
// store recovers without being rebuilt: commits apply, the workers whose
// batches were lost are resynced, and the reader sees them again.
func TestClusterSurvivesANodeStop(t *testing.T) {
	for _, tc := range []struct {
		name string
		// fullCoverage is cluster-require-full-coverage: yes (Redis's
		// default) stops the whole cluster while a slot is unserved; no
		// loses the stopped node's slots only.
		fullCoverage string
		// empty restarts the node without its data (no append-only
		// file), and commits nothing while it is down: no worker is
		// marked for resync, and only the vanished batch marks tell
		// the replicas what Redis lost.
		empty bool
	}{
		{"only the stopped node's slots lost", "no", false},
		{"the whole cluster down meanwhile", "yes", false},
		{"the node back empty between batches", "no", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			args := []string{"--cluster-require-full-coverage", tc.fullCoverage}
			if tc.empty {
				args = append(args, "--appendonly", "no")
			}
			cl := testredis.StartCluster(t, 3, args...)
			url := "redis-cluster://" + strings.Join(cl.Addrs(), ",")
			cfg := Config{Timeout: 300 * time.Millisecond, BreakerFailures: 3, BreakerOpen: 300 * time.Millisecond}
			a, b := New(client(t, url), cfg), New(client(t, url), cfg)
			reader := New(client(t, url), Config{Timeout: 2 * time.Second})
			admin, ok := client(t, url).(*redis.ClusterClient)
			if !ok {
				t.Fatal("a redis-cluster:// URL gave no cluster client")
			}
			slotOwner := func(key string) int {
				slot, err := admin.ClusterKeySlot(ctx, key).Result()
				if err != nil {
					t.Fatal(err)
				}
				return cl.SlotOwner(0, int(slot))
			}

			// two workers whose own parts live on each node
			byNode := map[int][]string{}
			for i := 1; len(byNode[0]) < 2 || len(byNode[1]) < 2 || len(byNode[2]) < 2; i++ {
				w := fmt.Sprintf("http://10.1.0.%d:8000", i)
				if n := slotOwner(a.own(w).keys[0]); len(byNode[n]) < 2 {
					byNode[n] = append(byNode[n], w)
				}
			}
			l2Node := slotOwner(a.shared("").keys[0])
			victim := (l2Node + 1) % 3 // the L2 part stays up: the stop costs only the victims' own parts
			load := &clusterLoad{seq: map[string]uint64{}}
			for n := range 3 {
				load.workers = append(load.workers, byNode[n]...)
			}
			// commitRound commits every worker's next batch on both replicas.
			commitRound := func() (errs []error) {
				for _, w := range load.workers {
					c := load.next(w)
					for _, s := range []*Store{a, b} {
						if err := s.Commit(c); err != nil {
							errs = append(errs, err)
						}
					}
				}
				return errs
			}
			// agree reports where the reader's shared view differs from a
			// replica's own index.
			agree := func() error {
				for c := range loadChains {
					keys := chainKeys(c)
					got, err := reader.LookupShared(keys, load.workers, nil)
					if err != nil {
						return err
					}
					for _, s := range []*Store{a, b} {
						want := s.local.Lookup(keys, load.workers, nil)
						for i, w := range load.workers {
							if got[i] != want[i] {
								return fmt.Errorf("chain %d, worker %s: shared %+v, own index %+v", c, w, got[i], want[i])
							}
						}
					}
				}
				return nil
			}

			// A new cluster's slot map settles by gossip: a commit may meet
			// a MOVED it has not settled yet (seen once under -race on a
			// loaded machine). The first clean round starts the test.
			settle := time.Now().Add(15 * time.Second)
			for errs := commitRound(); len(errs) > 0; errs = commitRound() {
				if time.Now().After(settle) {
					t.Fatalf("commits on a new cluster never succeeded: %v", errs)
				}
				time.Sleep(100 * time.Millisecond)
			}
			for range 6 {
				if errs := commitRound(); len(errs) > 0 {
					t.Fatalf("commits on a healthy cluster: %v", errs)
				}
			}
			if err := agree(); err != nil {
				t.Fatalf("healthy cluster: %v", err)
			}
			for n, addr := range cl.Addrs() {
				node := redis.NewClient(&redis.Options{Addr: addr})
				keys := node.DBSize(ctx).Val()
				_ = node.Close()
				if keys == 0 {
					t.Fatalf("node %d holds no key: the parts do not spread", n)
				}
			}

			// Lookups run on throughout, as requests would (paced: this is
			// no load test).
			var lookups atomic.Int64
			var slowest atomic.Int64
			stop := make(chan struct{})
			var wg sync.WaitGroup
			wg.Go(func() {
				tick := time.NewTicker(2 * time.Millisecond)
				defer tick.Stop()
				for c := 0; ; c++ {
					select {
					case <-stop:
						return
					case <-tick.C:
					}
					start := time.Now()
					a.Lookup(chainKeys(c%loadChains), load.workers, nil)
					if d := int64(time.Since(start)); d > slowest.Load() {
						slowest.Store(d)
					}
					lookups.Add(1)
				}
			})
			defer func() {
				close(stop)
				wg.Wait()
			}()

			cl.Stop(victim)
			testwait.For(t, 10*time.Second, "a failed lookup to be counted", func() bool {
				return testutil.ToFloat64(a.g.errs.WithLabelValues(opLookup)) > 0
			})
			if tc.empty {
				cl.Start(victim)
				for n := range 3 {
					cl.WaitOK(n, 30*time.Second)
				}
				for _, s := range []*Store{a, b} {
					for _, w := range load.workers {
						if s.flag(s.dirty, w) {
							t.Fatalf("worker %s marked for resync without a failed commit", w)
						}
					}
				}
			}
			victimFailed := tc.empty // nothing commits during this outage
			for range 6 {
				if tc.empty {
					break
				}
				for _, err := range commitRound() {
					if !errors.Is(err, ErrUnavailable) {
						t.Fatalf("commit error %v does not wrap ErrUnavailable", err)
					}
					for _, w := range byNode[victim] {
						victimFailed = victimFailed || strings.Contains(err.Error(), w)
					}
				}
			}
			if !victimFailed {
				t.Fatal("no commit of a worker on the stopped node failed")
			}
			for _, s := range []*Store{a, b} {
				for _, w := range byNode[victim] {
					if !s.flag(s.dirty, w) && !tc.empty {
						t.Fatalf("worker %s on the stopped node is not marked for resync", w)
					}
				}
			}
			// Meanwhile a replica routes on what it knows itself (the
			// emptied node is back already: its loss shows on the next
			// batch, below).
			for c := range loadChains {
				if tc.empty {
					break
				}
				keys := chainKeys(c)
				if got, want := a.Lookup(keys, load.workers, nil), a.local.Lookup(keys, load.workers, nil); fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("chain %d during the outage: %+v, own index %+v", c, got, want)
				}
			}
			if n := testutil.ToFloat64(a.g.errs.WithLabelValues(opCommit)); n == 0 && !tc.empty {
				t.Fatal("no commit error counted")
			}

			if !tc.empty {
				cl.Start(victim)
				for n := range 3 {
					cl.WaitOK(n, 30*time.Second)
				}
			} else {
				// The lost workers are whole again after one batch each,
				// not by later batches storing their blocks again (this
				// load would, within a few rounds).
				testwait.For(t, 10*time.Second, "the lookups to close the breaker", func() bool {
					return testutil.ToFloat64(a.g.open) == 0
				})
				if errs := commitRound(); len(errs) > 0 {
					t.Fatalf("first batches after the empty restart: %v", errs)
				}
				if err := agree(); err != nil {
					t.Fatalf("after one batch per worker: %v", err)
				}
			}
			var last error
			testwait.For(t, 30*time.Second, "the store to recover", func() bool {
				last = errors.Join(commitRound()...)
				if last == nil {
					last = agree()
				}
				return last == nil
			})
			for _, s := range []*Store{a, b} {
				for _, w := range load.workers {
					if s.flag(s.dirty, w) {
						t.Fatalf("worker %s still marked for resync after recovery", w)
					}
				}
			}
			// the commits that found the store recovered also closed the breaker
			if v := testutil.ToFloat64(a.g.open); v != 0 {
				t.Fatalf("breaker gauge %v after recovery", v)
			}
			if st := reader.Stats(); st.Keys != 0 {
				t.Fatalf("the reader committed nothing, yet its stats count %d keys", st.Keys)
			}
			if st := a.Stats(); len(st.Blocks) != len(load.workers) || st.Keys == 0 {
				t.Fatalf("stats after recovery: %+v", st)
			}
			close(stop)
			wg.Wait()
			stop = make(chan struct{}) // for the deferred close
			if lookups.Load() == 0 {
				t.Fatal("no lookup ran during the outage")
			}
			// a hang check, not a speed check: each lookup ends at its deadline
			if d := time.Duration(slowest.Load()); d > 5*time.Second {
				t.Fatalf("a lookup took %v", d)
			}
			t.Logf("%d lookups meanwhile, slowest %v", lookups.Load(), time.Duration(slowest.Load()))
		})
	}
}
