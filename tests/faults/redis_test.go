package faults

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/warmpath/warmpath/tests/harness"
)

// TestRedisLost stops the Redis that holds kvaware's shared index
// (--kv-index-redis; docker stop) mid-load, then starts it again. kvaware
// answers from the replica's own index meanwhile: no request fails because
// of it, the router's metrics count the Redis errors and show the breaker
// open, and its log says so; once Redis is back the breaker closes.
//
// Redis runs from Debian's redis-server packaged FROM scratch with the
// libraries it links (harness.HostImage): no registry is reachable here.
func TestRedisLost(t *testing.T) {
	nw := harness.NewNetwork(t)
	rdb := startRedis(t, nw)
	s := startStackOn(t, nw, "--kv-index-redis", "redis://redis:6379/0",
		"--kv-index-redis-breaker-open", "2s")
	s.mem.add("redis", rdb)
	const (
		rate     = 4.0
		dur      = 30 * time.Second
		faultAt  = 8 * time.Second
		downFor  = 10 * time.Second
		openMax  = 10 * time.Second
		closeMax = 15 * time.Second
	)
	sc := &scenario{Fault: "Redis holding the shared kvaware index stopped (docker stop) mid-load, then started again",
		Rate: rate, Duration: dur.Seconds(), Recovery: map[string]float64{}, Extra: map[string]float64{}}
	s.record(t, "redis_lost", sc)

	t0 := time.Now()
	results := make(chan []result, 1)
	go func() { results <- load(t.Context(), s, rate, dur) }()

	time.Sleep(faultAt)
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	if before := s.metric(t, "warmpath_router_kv_redis_errors_total"); before != 0 {
		t.Errorf("%v Redis errors before Redis was stopped, want 0", before)
	}
	// The index really lives in Redis.
	if keys := dbsize(t, hostPort(t, rdb, "6379")); keys == 0 {
		t.Fatal("Redis holds no keys after 8 s of load: the router does not keep its index there")
	}
	stoppedAt := time.Now()
	if err := rdb.Stop(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	opened := s.waitMetric(t, "warmpath_router_kv_redis_breaker_open", openMax, func(v float64) bool { return v == 1 })
	sc.Recovery["stop_to_breaker_open"] = round(opened.Sub(stoppedAt).Seconds())

	time.Sleep(time.Until(stoppedAt.Add(downFor)))
	startedAt := time.Now()
	if _, err := rdb.Restart(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	closed := s.waitMetric(t, "warmpath_router_kv_redis_breaker_open", closeMax, func(v float64) bool { return v == 0 })
	sc.Recovery["start_to_breaker_closed"] = round(closed.Sub(startedAt).Seconds())
	// The restarted Redis is empty: the workers' next batches write the
	// index there again.
	refilled := time.Now()
	// Docker may publish the restarted container on another host port.
	for dbsize(t, hostPort(t, rdb, "6379")) == 0 {
		if time.Since(refilled) > closeMax {
			t.Fatalf("the restarted Redis still holds no keys after %v", closeMax)
		}
		time.Sleep(200 * time.Millisecond)
	}
	sc.Recovery["start_to_index_in_redis"] = round(time.Since(startedAt).Seconds())

	rs := <-results
	sc.RouterRetries = s.retries(t)
	sc.Extra["redis_errors"] = s.metric(t, "warmpath_router_kv_redis_errors_total")
	c := summarise(rs, stoppedAt)
	sc.counts = &c
	logFailures(t, t0, rs)
	t.Logf("stopped Redis at +%.1fs: breaker open after %.2fs; started it at +%.1fs: breaker closed after %.2fs, index back in Redis after %.2fs; %v Redis errors",
		stoppedAt.Sub(t0).Seconds(), sc.Recovery["stop_to_breaker_open"], startedAt.Sub(t0).Seconds(),
		sc.Recovery["start_to_breaker_closed"], sc.Recovery["start_to_index_in_redis"], sc.Extra["redis_errors"])

	if failed := c.Sent - c.Succeeded; failed != 0 {
		t.Errorf("%d of %d requests failed, want none: a lost Redis only costs routing knowledge", failed, c.Sent)
	}
	if sc.Extra["redis_errors"] == 0 {
		t.Error("warmpath_router_kv_redis_errors_total stayed 0 while Redis was down")
	}
	logs, err := s.router.Logs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"kv redis: call failed; answering from this replica's own index", "kv redis: breaker open"} {
		if !strings.Contains(logs, want) {
			t.Errorf("router log lacks %q", want)
		}
	}
	checkSent(t, sc.Sent, rate, dur)
}

// startRedis starts Redis on nw as "redis", without persistence.
func startRedis(t *testing.T, nw *harness.Network) *harness.Container {
	t.Helper()
	return harness.Start(t, harness.Spec{
		Image: harness.HostImage(t, "redis-server", "6379"), Network: nw, Aliases: []string{"redis"},
		Args: []string{"--port", "6379", "--save", "", "--appendonly", "no", "--protected-mode", "no"},
		Port: "6379", ReadyLog: "Ready to accept connections", // redis-server speaks no HTTP
	})
}

// dbsize asks the Redis published at addr (host:port) how many keys it
// holds.
func dbsize(t *testing.T, addr string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	n, err := rdb.DBSize(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n
}
