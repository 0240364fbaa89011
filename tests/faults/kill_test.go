package faults

import (
	"context"
	"net/http"
	"testing"
	"time"
)

// TestWorkerKilled kills a worker (SIGKILL) mid-load: the one with the most
// requests in flight, just after three long non-streamed requests went
// out, so one of those is usually running on it. Non-streamed requests
// it held, or that reach it before the router notices, are retried on
// another worker before their first byte; its streams end with an error
// event within the idle timeout; within 2 s it leaves the rotation, and
// once a probe fails the router forgets what it cached.
//
// The router runs with --retry-on connect-failure,refused,reset: a killed
// worker closes the connections of requests it was running after the
// whole request was sent, which the default does not re-send
// (docs/router.md, "Failure model").
func TestWorkerKilled(t *testing.T) {
	s := startStack(t, "--retry-on", "connect-failure,refused,reset")
	const (
		rate     = 4.0
		dur      = 24 * time.Second
		faultAt  = 8 * time.Second
		leaveMax = 2 * time.Second
		// clearMax: the index goes when a probe fails, at worst a probe
		// interval and a probe timeout after the kill (a connection to a
		// container that is gone gets no reset), plus slack.
		clearMax = 2*probeInterval + time.Second
		// longTokens makes a non-streamed answer take about 2.5 s.
		longTokens = 600
	)
	sc := &scenario{Fault: "worker SIGKILL (docker kill) mid-load", Rate: rate, Duration: dur.Seconds(), Recovery: map[string]float64{}}
	s.record(t, "worker_killed", sc)

	t0 := time.Now()
	results := make(chan []result, 1)
	go func() { results <- load(t.Context(), s, rate, dur) }()

	time.Sleep(faultAt - time.Second)
	long := make(chan result, 3)
	for i := range 3 {
		go func() { long <- send(t.Context(), http.DefaultClient, s.url(), 1000+i, false, longTokens) }()
	}
	time.Sleep(time.Second)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	eps, err := s.endpoints(ctx)
	if err != nil {
		t.Fatal(err)
	}
	victimURL := s.urls[0]
	for _, u := range s.urls {
		if eps[u].InFlight > eps[victimURL].InFlight {
			victimURL = u
		}
	}
	t.Logf("in flight per worker before the kill: %v", inFlight(eps))
	killedAt := time.Now()
	if err := s.workers[victimURL].Kill(ctx); err != nil {
		t.Fatal(err)
	}
	left := s.waitRotation(t, 30*time.Second, outOfRotation(victimURL))
	sc.Recovery["out_of_rotation"] = round(left.Sub(killedAt).Seconds())
	// What the router believed the dead worker cached goes with it.
	s.waitHeld(t, victimURL, 10*time.Second, func(n int) bool { return n == 0 })
	cleared := time.Since(killedAt)
	sc.Recovery["index_cleared"] = round(cleared.Seconds())

	rs := <-results
	for range 3 {
		rs = append(rs, <-long)
	}
	sc.RouterRetries = s.retries(t)
	c := summarise(rs, killedAt)
	sc.counts = &c
	logFailures(t, t0, rs)
	t.Logf("killed %s at +%.1fs; out of rotation after %.2fs, its index cleared after %.2fs; in flight then: %v", victimURL, killedAt.Sub(t0).Seconds(), sc.Recovery["out_of_rotation"], sc.Recovery["index_cleared"], sc.InFlightAtFault)

	if got := left.Sub(killedAt); got > leaveMax {
		t.Errorf("killed worker left the rotation after %v, want within %v", got, leaveMax)
	}
	if cleared > clearMax {
		t.Errorf("killed worker's index cleared after %v, want within %v", cleared, clearMax)
	}
	if sc.NonStreamedFailed != 0 {
		t.Errorf("%d of %d non-streamed requests failed, want none: the router retries before the first byte", sc.NonStreamedFailed, sc.NonStreamed)
	}
	checkStreams(t, t0, rs, *sc.counts)
	checkSent(t, sc.Sent, rate, dur)
}

// inFlight is each worker's router requests in flight.
func inFlight(eps map[string]endpoint) map[string]int {
	m := make(map[string]int, len(eps))
	for u, ep := range eps {
		m[u] = ep.InFlight
	}
	return m
}
