package faults

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/warmpath/warmpath/tests/harness"
)

// TestCacheNodePartitionedUnderLoad puts the cache cluster behind the
// workers (their LMCache L2 is lm://cache-a, whose cluster of two spreads
// the chunks over both nodes) and, mid-load, takes cache-b off the network
// (docker network disconnect), then puts it back. The chunks B owns become
// misses the workers compute again: no request fails, and none waits on the
// partition longer than the L2's deadlines.
func TestCacheNodePartitionedUnderLoad(t *testing.T) {
	const (
		peerTimeout   = 500 * time.Millisecond
		remoteTimeout = 2 * time.Second
		rate          = 4.0
		dur           = 26 * time.Second
		faultAt       = 8 * time.Second
		partition     = 8 * time.Second
		// slowest is what any request may take: a 200-token stream (about
		// 1 s), a few L2 calls each bounded by the peer timeout through A,
		// and slack for two shared cores.
		slowest = 6 * time.Second
	)
	nw := harness.NewNetwork(t)
	a, b := cacheCluster(t, nw, peerTimeout, 2*time.Second)
	// A GPU cache of a few prompts: families leave it and come back from
	// the L2 all through the run, the partition included. Round robin
	// spreads each prompt family over the workers, so they read from the
	// L2 what another one computed.
	s := startStackWith(t, nw, l2Stack(remoteTimeout, 64, 1024, "--strategy", "roundrobin"))
	s.mem.add("cache-a", a)
	s.mem.add("cache-b", b)
	sc := &scenario{Fault: fmt.Sprintf("docker network disconnect, for %v, of one of the two cache servers the workers use as their L2", partition),
		Rate: rate, Duration: dur.Seconds(), Recovery: map[string]float64{}, Extra: map[string]float64{}}
	s.record(t, "cache_node_partitioned_under_load", sc)

	t0 := time.Now()
	results := make(chan []result, 1)
	go func() { results <- load(t.Context(), s, rate, dur) }()
	time.Sleep(faultAt)
	readsBefore := s.workerMetric(t, "lmcache:num_remote_read_requests_total")
	if readsBefore == 0 {
		t.Fatal("no worker read from the cache cluster before the partition: the L2 is not in use")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cutAt := time.Now()
	if err := b.Disconnect(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(partition)
	readsDuring := s.workerMetric(t, "lmcache:num_remote_read_requests_total") - readsBefore
	if err := b.Reconnect(ctx); err != nil {
		t.Fatal(err)
	}
	rs := <-results
	sc.Extra["worker_l2_reads_during_partition"] = readsDuring

	sc.RouterRetries = s.retries(t)
	c := summarise(rs, cutAt)
	sc.counts = &c
	sc.Extra["worker_l2_reads"] = s.workerMetric(t, "lmcache:num_remote_read_requests_total")
	sc.Extra["worker_l2_errors"] = s.workerMetric(t, "warmpath_vllmsim_lmcache_remote_errors_total")
	sc.Extra["worker_l2_corrupt"] = s.workerMetric(t, "warmpath_vllmsim_lmcache_remote_corrupt_total")
	longest := longestRequest(rs)
	sc.Extra["longest_request_seconds"] = round(longest.Seconds())
	logFailures(t, t0, rs)
	t.Logf("partitioned cache-b at +%.1fs for %v: longest request %.2fs; workers read %v chunks from the L2 (%v during the partition; %v errors, %v corrupt)",
		cutAt.Sub(t0).Seconds(), partition, longest.Seconds(), sc.Extra["worker_l2_reads"], readsDuring, sc.Extra["worker_l2_errors"], sc.Extra["worker_l2_corrupt"])
	if readsDuring == 0 {
		t.Error("no worker read from the L2 during the partition: the scenario exercised nothing")
	}

	if failed := c.Sent - c.Succeeded; failed != 0 {
		t.Errorf("%d of %d requests failed, want none: a lost L2 node only costs hits", failed, c.Sent)
	}
	if longest > slowest {
		t.Errorf("the longest request took %v, want within %v", longest, slowest)
	}
	if sc.Extra["worker_l2_corrupt"] != 0 {
		t.Errorf("workers read %v corrupt values from the L2", sc.Extra["worker_l2_corrupt"])
	}
	checkSent(t, sc.Sent, rate, dur)
}

// l2Stack is the stack whose workers' LMCache L2 is the cache cluster
// behind lm://cache-a, with L1 off (every external hit comes from the
// cluster) and GPU caches of gpuBlocks, plus router flags.
func l2Stack(remoteTimeout time.Duration, gpuBlocks, maxModelLen int, routerArgs ...string) stackOpts {
	return stackOpts{
		simArgs: []string{"--kv-transfer-config", `{"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both"}`,
			"--lmcache-remote-url", "lm://cache-a:" + lmPort, "--lmcache-remote-timeout", remoteTimeout.String(),
			"--num-gpu-blocks-override", itoa(gpuBlocks), "--max-model-len", itoa(maxModelLen)},
		simEnv:     map[string]string{"LMCACHE_LOCAL_CPU": "false"},
		routerArgs: routerArgs,
	}
}

// longestRequest is the longest any of rs took.
func longestRequest(rs []result) time.Duration {
	var longest time.Duration
	for _, r := range rs {
		longest = max(longest, r.end.Sub(r.start))
	}
	return longest
}

// workerMetric sums name over every worker's /metrics.
func (s *stack) workerMetric(t *testing.T, name string) float64 {
	t.Helper()
	var sum float64
	for _, c := range s.workers {
		v, _, err := harness.SumSamples(mustGet(t, c.URL+"/metrics"), name)
		if err != nil {
			t.Fatal(err)
		}
		sum += v
	}
	return sum
}
