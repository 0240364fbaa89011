package faults

import (
	"context"
	"net/url"
	"testing"
	"time"
)

// TestWorkerRestartedEventsLost restarts a worker (docker restart) between
// two rounds of load: its GPU cache is gone, and the events that built the
// router's view of it went with it. The router must drop that view — with
// no request in between, every block it still credits the worker with is
// a wrong credit — and must take the restarted worker's new event stream,
// so that the next round of load indexes it again.
func TestWorkerRestartedEventsLost(t *testing.T) {
	s := startStack(t)
	const (
		rate      = 4.0
		round     = 8 * time.Second
		clearMax  = 10 * time.Second
		resumeMax = 15 * time.Second
	)
	sc := &scenario{Fault: "worker restarted (docker restart) between two rounds of load: its cache and event stream start afresh",
		Rate: rate, Duration: 2 * round.Seconds(), Recovery: map[string]float64{}, Extra: map[string]float64{}}
	s.record(t, "worker_restarted_events_lost", sc)

	t0 := time.Now()
	rs := load(t.Context(), s, rate, round)
	victim := s.urls[0]
	before := s.waitHeld(t, victim, 10*time.Second, func(n int) bool { return n > 0 })
	sc.Extra["gpu_blocks_credited_before"] = float64(before)

	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	restartAt := time.Now()
	if _, err := s.workers[victim].Restart(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	s.waitHeld(t, victim, clearMax, func(n int) bool { return n == 0 })
	sc.Recovery["restart_to_index_cleared"] = round2(time.Since(restartAt))
	back := s.waitRotation(t, 30*time.Second, inRotation(victim))
	sc.Recovery["restart_to_rotation"] = round2(back.Sub(restartAt))
	// Nothing was sent meanwhile: the worker's cache is empty, and a block
	// credited now would be one the router never forgot.
	time.Sleep(2 * time.Second)
	if n := s.held(t, victim); n != 0 {
		t.Errorf("the router credits the restarted worker with %d GPU blocks before any request reached it, want 0", n)
	}

	resumeAt := time.Now()
	second := make(chan []result, 1)
	go func() { second <- load(t.Context(), s, rate, round) }()
	after := s.waitHeld(t, victim, resumeMax, func(n int) bool { return n > 0 })
	sc.Recovery["second_round_to_indexed_again"] = round2(time.Since(resumeAt))
	sc.Extra["gpu_blocks_credited_after"] = float64(after)
	rs = append(rs, <-second...)

	sc.RouterRetries = s.retries(t)
	c := summarise(rs, restartAt)
	sc.counts = &c
	logFailures(t, t0, rs)
	t.Logf("restarted %s: %d GPU blocks credited before; cleared %.2fs after the restart, in rotation after %.2fs; indexed again (%d blocks first seen) %.2fs into the second round",
		victim, before, sc.Recovery["restart_to_index_cleared"], sc.Recovery["restart_to_rotation"], after, sc.Recovery["second_round_to_indexed_again"])
	if failed := c.Sent - c.Succeeded; failed != 0 {
		t.Errorf("%d of %d requests failed, want none: no request was in flight at the restart", failed, c.Sent)
	}
	checkSent(t, sc.Sent, rate, 2*round)
}

// held is how many GPU blocks the router credits worker with
// (/debug/kv/held).
func (s *stack) held(t *testing.T, worker string) int {
	t.Helper()
	return len(s.heldBlocks(t, worker))
}

// heldBlocks are the GPU blocks the router credits worker with
// (/debug/kv/held), as the worker's events name them.
func (s *stack) heldBlocks(t *testing.T, worker string) []uint64 {
	t.Helper()
	var v struct {
		Hashes []uint64 `json:"hashes"`
	}
	getJSON(t, s.url()+"/debug/kv/held?tier=gpu&worker="+url.QueryEscape(worker), &v)
	return v.Hashes
}

// waitHeld polls held every 100ms until ok accepts it and returns it; it
// fails the test after limit.
func (s *stack) waitHeld(t *testing.T, worker string, limit time.Duration, ok func(int) bool) int {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		n := s.held(t, worker)
		if ok(n) {
			return n
		}
		if time.Now().After(deadline) {
			t.Fatalf("the router credits %s with %d GPU blocks after %v", worker, n, limit)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func round2(d time.Duration) float64 { return round(d.Seconds()) }
