package faults

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/warmpath/warmpath/tests/harness"
)

// TestStackCacheServerKilled runs the whole stack at once — the kvaware
// router with its index shared in Redis, three workers whose LMCache L2 is
// a two-node cache cluster, each node with a disk tier on its own volume —
// and, mid-load, SIGKILLs the cache node the workers talk to (docker kill
// -s KILL), then starts it again on the same volume. The workers' L2 calls
// fail or time out meanwhile and become misses they compute again: no
// request fails, none waits past the L2's deadlines, no value read from
// the L2 is corrupt. The restarted node serves the workers again with what
// its disk tier kept, within that tier's capacity; Redis never notices.
func TestStackCacheServerKilled(t *testing.T) {
	const (
		peerTimeout   = 500 * time.Millisecond
		remoteTimeout = 2 * time.Second
		rate          = 4.0
		dur           = 30 * time.Second
		faultAt       = 8 * time.Second
		downFor       = 6 * time.Second
		// The simulator stores each 256-token chunk's KV divided by 64, 512
		// KiB: too large for a 1 MiB memory tier's 64 KiB shards, so every
		// chunk goes straight to the disk tier, which holds two (each
		// takes 516 KiB in 4 KiB blocks) and evicts.
		memCap  = 1 << 20
		diskCap = 3 << 19
		// slowest is what any request may take: a 200-token stream (about
		// 1 s), a few L2 calls each bounded by the remote timeout, and slack
		// for two shared cores.
		slowest = 8 * time.Second
	)
	nw := harness.NewNetwork(t)
	rdb := startRedis(t, nw)
	dirs := map[string]string{}
	a, b := cacheCluster(t, nw, peerTimeout, 2*time.Second, func(alias string, s *harness.Spec) {
		dirs[alias] = harness.WritableDir(t)
		s.Args = append(s.Args, "--memory-capacity-bytes", itoa(memCap), "--disk-dir", "/data", "--disk-capacity-bytes", itoa(diskCap))
		s.Mounts = map[string]string{dirs[alias]: "/data"}
	})
	// A GPU cache of two prompts (about 320 tokens, and 200 more for a
	// stream): the families kvaware gives a worker evict each other and
	// come back from the L2 all through the run.
	s := startStackWith(t, nw, l2Stack(remoteTimeout, 48, 768, "--kv-index-redis", "redis://redis:6379/0"))
	s.mem.add("cache-a", a)
	s.mem.add("cache-b", b)
	s.mem.add("redis", rdb)
	sc := &scenario{Fault: fmt.Sprintf("docker kill -s KILL of the cache server the workers use as their L2 (cluster of two, disk tiers on volumes), docker start on the same volume %v later; kvaware's index in Redis", downFor),
		Rate: rate, Duration: dur.Seconds(), Recovery: map[string]float64{}, Extra: map[string]float64{}}
	s.record(t, "stack_cache_server_killed", sc)

	t0 := time.Now()
	results := make(chan []result, 1)
	go func() { results <- load(t.Context(), s, rate, dur) }()
	time.Sleep(faultAt)
	readsBefore := s.workerMetric(t, "lmcache:num_remote_read_requests_total")
	if readsBefore == 0 {
		t.Fatalf("no worker read from the cache cluster before the kill (%v chunks written): the L2 is not in use",
			s.workerMetric(t, "lmcache:num_remote_write_requests_total"))
	}
	if keys := dbsize(t, hostPort(t, rdb, "6379")); keys == 0 {
		t.Fatal("Redis holds no keys: the router does not keep its index there")
	}
	diskBefore, _, err := metric(t.Context(), a.URL, "warmpath_cache_stored_bytes", `tier="disk"`)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	killAt := time.Now()
	if err := a.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(downFor)
	errsDown := s.workerMetric(t, "warmpath_vllmsim_lmcache_remote_errors_total")
	startAt := time.Now()
	u, err := a.Restart(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	readyAt := waitPath(t, u, "/readyz", 60*time.Second)
	sc.Recovery["start_to_ready"] = round(readyAt.Sub(startAt).Seconds())
	diskAfterStart, _, err := metric(t.Context(), u, "warmpath_cache_stored_bytes", `tier="disk"`)
	if err != nil {
		t.Fatal(err)
	}
	// The workers come back to it: their L2 reads, which it answers, grow.
	readsAtStart := s.workerMetric(t, "lmcache:num_remote_read_requests_total")
	servedAt := time.Now()
	for {
		if served, _, err := harnessSum(t, u, "warmpath_cache_requests_total"); err == nil && served > 0 &&
			s.workerMetric(t, "lmcache:num_remote_read_requests_total") > readsAtStart {
			break
		}
		if time.Since(servedAt) > 15*time.Second {
			t.Fatal("the workers read nothing from the restarted cache server within 15 s")
		}
		time.Sleep(200 * time.Millisecond)
	}
	sc.Recovery["ready_to_serving_workers"] = round(time.Since(readyAt).Seconds())
	rs := <-results

	sc.RouterRetries = s.retries(t)
	c := summarise(rs, killAt)
	sc.counts = &c
	longest := longestRequest(rs)
	sc.Extra["longest_request_seconds"] = round(longest.Seconds())
	sc.Extra["worker_l2_reads"] = s.workerMetric(t, "lmcache:num_remote_read_requests_total")
	sc.Extra["worker_l2_errors"] = s.workerMetric(t, "warmpath_vllmsim_lmcache_remote_errors_total")
	sc.Extra["worker_l2_errors_while_down"] = errsDown
	sc.Extra["worker_l2_corrupt"] = s.workerMetric(t, "warmpath_vllmsim_lmcache_remote_corrupt_total")
	sc.Extra["router_redis_errors"] = s.metric(t, "warmpath_router_kv_redis_errors_total")
	stored, _, err := metric(t.Context(), u, "warmpath_cache_stored_bytes", `tier="disk"`)
	if err != nil {
		t.Fatal(err)
	}
	onDisk, objects := dirBytes(t, dirs["cache-a"])
	sc.Extra["disk_stored_bytes_before_kill"], sc.Extra["disk_stored_bytes_at_restart"] = diskBefore, diskAfterStart
	sc.Extra["disk_stored_bytes"], sc.Extra["disk_dir_bytes"], sc.Extra["disk_objects"] = stored, float64(onDisk), float64(objects)
	sc.Extra["disk_capacity_bytes"] = diskCap
	for alias, c := range map[string]*harness.Container{"cache_a": a, "cache_b": b} {
		if ev, _, err := metric(t.Context(), c.URL, "warmpath_cache_evictions_total", `tier="disk"`); err == nil {
			sc.Extra["disk_evictions_"+alias] = ev // cache-a's since its restart
		}
	}
	logFailures(t, t0, rs)
	t.Logf("killed cache-a at +%.1fs (%v L2 errors at the workers while it was down), ready %.2fs after docker start, serving the workers %.2fs later; its disk tier %.0f bytes before the kill, %.0f at the restart, %.0f at the end (%d bytes, %d objects in the directory; capacity %d); longest request %.2fs; workers read %v chunks from the L2, %v errors, %v corrupt; %v Redis errors",
		killAt.Sub(t0).Seconds(), errsDown, sc.Recovery["start_to_ready"], sc.Recovery["ready_to_serving_workers"],
		diskBefore, diskAfterStart, stored, onDisk, objects, diskCap, longest.Seconds(),
		sc.Extra["worker_l2_reads"], sc.Extra["worker_l2_errors"], sc.Extra["worker_l2_corrupt"], sc.Extra["router_redis_errors"])

	if failed := c.Sent - c.Succeeded; failed != 0 {
		t.Errorf("%d of %d requests failed, want none: a lost L2 node only costs hits", failed, c.Sent)
	}
	if longest > slowest {
		t.Errorf("the longest request took %v, want within %v", longest, slowest)
	}
	if sc.Extra["worker_l2_corrupt"] != 0 {
		t.Errorf("workers read %v corrupt values from the L2", sc.Extra["worker_l2_corrupt"])
	}
	if errsDown == 0 {
		t.Error("the workers counted no L2 error while its node was down: the kill exercised nothing")
	}
	if diskBefore > 0 && diskAfterStart == 0 {
		t.Errorf("the disk tier held %.0f bytes before the kill and none after the restart: it lost its volume's objects", diskBefore)
	}
	if stored > diskCap*1.05 || float64(onDisk) > diskCap*1.05 {
		t.Errorf("disk tier over its capacity %d: %.0f accounted, %d on disk", diskCap, stored, onDisk)
	}
	if sc.Extra["router_redis_errors"] != 0 {
		t.Errorf("%v Redis errors: the cache server's loss reached the router's index", sc.Extra["router_redis_errors"])
	}
	checkSent(t, sc.Sent, rate, dur)
}
