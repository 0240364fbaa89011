package faults

import (
	"context"
	"testing"
	"time"
)

// TestWorkerKilled kills a worker (SIGKILL) mid-load. Non-streamed requests
// it held, or that reach it before the router notices, are retried on
// another worker before their first byte; its streams end, short of
// [DONE], within the idle timeout; and it leaves the rotation within a few
// seconds.
//
// The router runs with --retry-on connect-failure,refused,reset: a killed
// worker closes the connections of requests it was running after the
// whole request was sent, which the default does not re-send
// (docs/router.md, "Failure model").
func TestWorkerKilled(t *testing.T) {
	s := startStack(t, "--retry-on", "connect-failure,refused,reset")
	const (
		rate      = 4.0
		dur       = 24 * time.Second
		faultAt   = 8 * time.Second
		leaveMax  = 5 * time.Second
		victimURL = "http://sim-b:8000"
	)
	sc := &scenario{Fault: "worker SIGKILL (docker kill) mid-load", Rate: rate, Duration: dur.Seconds(), Recovery: map[string]float64{}}
	record(t, "worker_killed", sc)

	t0 := time.Now()
	results := make(chan []result, 1)
	go func() { results <- load(t.Context(), s, rate, dur) }()

	time.Sleep(faultAt)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	killedAt := time.Now()
	if err := s.workers[victimURL].Kill(ctx); err != nil {
		t.Fatal(err)
	}
	left := s.waitRotation(t, 30*time.Second, outOfRotation(victimURL))
	sc.Recovery["out_of_rotation"] = round(left.Sub(killedAt).Seconds())

	rs := <-results
	sc.RouterRetries = s.retries(t)
	sc.counts = summarise(rs, killedAt)
	logFailures(t, t0, rs)
	t.Logf("killed %s at +%.1fs; out of rotation after %.2fs; in flight then: %v", victimURL, killedAt.Sub(t0).Seconds(), sc.Recovery["out_of_rotation"], sc.InFlightAtFault)

	if got := left.Sub(killedAt); got > leaveMax {
		t.Errorf("killed worker left the rotation after %v, want within %v", got, leaveMax)
	}
	if sc.NonStreamedFailed != 0 {
		t.Errorf("%d of %d non-streamed requests failed, want none: the router retries before the first byte", sc.NonStreamedFailed, sc.NonStreamed)
	}
	checkStreams(t, t0, rs, sc.counts)
	if sc.Sent < int(rate*dur.Seconds())*3/4 {
		t.Errorf("sent %d requests, want about %v", sc.Sent, rate*dur.Seconds())
	}
}
