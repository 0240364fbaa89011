package faults

import (
	"context"
	"testing"
	"time"
)

// TestWorkerHung pauses a worker (docker pause: its sockets stay open, the
// kernel still accepts connections, nothing answers) for pauseFor
// mid-load, then thaws it. The router's short --ttfb-timeout and probes take
// it out of the rotation within a few seconds, and it stays out while
// frozen; no non-streamed request fails, since --retry-on timeout re-sends
// what the frozen worker holds before its first byte; streams it was
// answering end with an error event within the idle timeout; and it
// rejoins within 2 s of the thaw.
func TestWorkerHung(t *testing.T) {
	const ttfb = 2 * time.Second
	s := startStack(t, "--ttfb-timeout", ttfb.String(), "--retry-on", "connect-failure,refused,timeout")
	const (
		rate      = 4.0
		dur       = 46 * time.Second
		faultAt   = 6 * time.Second
		pauseFor  = 30 * time.Second
		leaveMax  = 5 * time.Second
		rejoinMax = 2 * time.Second
		victimURL = "http://sim-b:8000"
	)
	sc := &scenario{Fault: "worker frozen (docker pause) 30s, then thawed", Rate: rate, Duration: dur.Seconds(), Recovery: map[string]float64{}}
	s.record(t, "worker_hung", sc)

	t0 := time.Now()
	results := make(chan []result, 1)
	go func() { results <- load(t.Context(), s, rate, dur) }()

	time.Sleep(faultAt)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	victim := s.workers[victimURL]
	pausedAt := time.Now()
	if err := victim.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	thawed := false
	t.Cleanup(func() {
		if !thawed {
			_ = victim.Unpause(context.Background())
		}
	})
	left := s.waitRotation(t, 30*time.Second, outOfRotation(victimURL))
	sc.Recovery["out_of_rotation"] = round(left.Sub(pausedAt).Seconds())

	// While frozen, it stays out.
	for time.Until(pausedAt.Add(pauseFor)) > 0 {
		eps, err := s.endpoints(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if outOfRotation(victimURL)(eps) != nil {
			t.Errorf("frozen worker back in rotation at +%.1fs: %+v", time.Since(t0).Seconds(), eps[victimURL])
		}
		time.Sleep(min(500*time.Millisecond, time.Until(pausedAt.Add(pauseFor))))
	}
	ctx, cancel = context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := victim.Unpause(ctx); err != nil {
		t.Fatal(err)
	}
	thawed = true
	unpausedAt := time.Now()
	back := s.waitRotation(t, 30*time.Second, inRotation(victimURL))
	sc.Recovery["back_in_rotation"] = round(back.Sub(unpausedAt).Seconds())

	rs := <-results
	sc.RouterRetries = s.retries(t)
	c := summarise(rs, pausedAt)
	sc.counts = &c
	logFailures(t, t0, rs)
	t.Logf("paused %s at +%.1fs for %v: out of rotation after %.2fs, back %.2fs after the thaw; in flight at the pause: %v",
		victimURL, pausedAt.Sub(t0).Seconds(), pauseFor, sc.Recovery["out_of_rotation"], sc.Recovery["back_in_rotation"], sc.InFlightAtFault)

	if got := left.Sub(pausedAt); got > leaveMax {
		t.Errorf("hung worker left the rotation after %v, want within %v", got, leaveMax)
	}
	if got := back.Sub(unpausedAt); got > rejoinMax {
		t.Errorf("thawed worker rejoined the rotation after %v, want within %v", got, rejoinMax)
	}
	if sc.NonStreamedFailed != 0 {
		t.Errorf("%d of %d non-streamed requests failed, want none: requests to the hung worker are retried elsewhere", sc.NonStreamedFailed, sc.NonStreamed)
	}
	checkStreams(t, t0, rs, *sc.counts)
	checkSent(t, sc.Sent, rate, dur)
}
