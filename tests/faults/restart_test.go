package faults

import (
	"context"
	"net/http"
	"testing"
	"time"
)

// TestRouterRestarted restarts the router (docker restart: SIGTERM, its
// --shutdown-grace for requests in flight, then a new process) mid-load.
// Clients see errors only while it is down, and every request sent once it
// is ready again succeeds.
func TestRouterRestarted(t *testing.T) {
	const grace = 3 * time.Second
	s := startStack(t, "--shutdown-grace", grace.String())
	const (
		rate     = 4.0
		dur      = 30 * time.Second
		faultAt  = 8 * time.Second
		readyMax = 20 * time.Second
		indexMax = 5 * time.Second
	)
	sc := &scenario{Fault: "router restarted (docker restart) mid-load", Rate: rate, Duration: dur.Seconds(), Recovery: map[string]float64{}}
	s.record(t, "router_restarted", sc)

	t0 := time.Now()
	results := make(chan []result, 1)
	go func() { results <- load(t.Context(), s, rate, dur) }()

	time.Sleep(faultAt)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	indexed := s.metric(t, "warmpath_router_kv_index_blocks")
	if indexed == 0 {
		t.Fatal("the router indexed no block before its restart")
	}
	restartAt := time.Now()
	// Docker's stop timeout is above the router's grace: it drains, then
	// exits on its own.
	u, err := s.router.Restart(ctx, 3*grace)
	if err != nil {
		t.Fatal(err)
	}
	s.setBase(u)
	readyAt := waitReady(t, u, readyMax)
	sc.Recovery["restart_to_ready"] = round(readyAt.Sub(restartAt).Seconds())
	// The new process starts with an empty index and recovers it from the
	// workers' replay sockets as it subscribes: at least every block it held
	// before (no request reached a worker meanwhile to evict any).
	recovered := s.waitMetric(t, "warmpath_router_kv_index_blocks", indexMax, func(v float64) bool { return v >= indexed })
	sc.Recovery["ready_to_index_recovered"] = round(recovered.Sub(readyAt).Seconds())

	rs := <-results
	sc.RouterRetries = s.retries(t)
	c := summarise(rs, restartAt)
	sc.counts = &c
	logFailures(t, t0, rs)
	var firstFail, lastFail time.Time
	after := 0
	for _, r := range rs {
		if !r.ok() {
			if firstFail.IsZero() || r.end.Before(firstFail) {
				firstFail = r.end
			}
			if r.end.After(lastFail) {
				lastFail = r.end
			}
		}
		switch {
		case r.start.After(readyAt):
			after++
			if !r.ok() {
				t.Errorf("request at +%.2fs, after the router was ready again, failed: %s %s", r.start.Sub(t0).Seconds(), r.cause, r.detail)
			}
		case !r.ok() && (r.end.Before(restartAt) || r.end.After(readyAt)):
			t.Errorf("request at +%.2fs failed at +%.2fs, outside the restart window [+%.2fs, +%.2fs]: %s %s",
				r.start.Sub(t0).Seconds(), r.end.Sub(t0).Seconds(), restartAt.Sub(t0).Seconds(), readyAt.Sub(t0).Seconds(), r.cause, r.detail)
		}
	}
	if !firstFail.IsZero() {
		// From the first error a client saw to the last.
		sc.Recovery["client_error_window"] = round(lastFail.Sub(firstFail).Seconds())
	}
	t.Logf("restarted the router at +%.1fs (%v blocks indexed): ready after %.2fs, index recovered %.2fs later; clients saw errors for %.2fs; %d requests after it was ready; in flight then: %v",
		restartAt.Sub(t0).Seconds(), indexed, sc.Recovery["restart_to_ready"], sc.Recovery["ready_to_index_recovered"],
		sc.Recovery["client_error_window"], after, sc.InFlightAtFault)
	if after < 10 {
		t.Errorf("only %d requests sent after the router was ready again, want ≥ 10", after)
	}
	if sc.StreamsHung != 0 {
		t.Errorf("%d streams hung past %v", sc.StreamsHung, requestBound)
	}
	checkSent(t, sc.Sent, rate, dur)
}

// waitReady polls base/ready every 100ms until it answers 200 and returns
// when it did; it fails the test after limit.
func waitReady(t *testing.T, base string, limit time.Duration) time.Time {
	t.Helper()
	hc := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(limit)
	for {
		resp, err := hc.Get(base + "/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return time.Now()
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("router not ready %v after its restart: %v", limit, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
