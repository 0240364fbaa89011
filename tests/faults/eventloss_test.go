package faults

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/warmpath/warmpath/tests/harness"
)

// TestWorkerEventsDroppedAndReordered puts a relay (eventproxy) between the
// router and one worker's KV-event stream and, under load, has it drop
// every third message for a while, then swap every pair, without the
// worker or the router restarting. The router must see each gap by the
// messages' sequence numbers and fill it from the worker's replay socket,
// and take a late message as one it already applied: once the load ends,
// the GPU blocks it credits each worker with are exactly those the worker
// holds (its /debug/kv/gpu) — no wrong credit left, none missing.
func TestWorkerEventsDroppedAndReordered(t *testing.T) {
	s := startStackWith(t, harness.NewNetwork(t), stackOpts{eventProxy: true})
	s.mem.add("eventproxy", s.proxy)
	const (
		rate     = 4.0
		dur      = 24 * time.Second
		dropAt   = 4 * time.Second
		swapAt   = 12 * time.Second
		cleanAt  = 18 * time.Second
		agreeMax = 10 * time.Second
	)
	sc := &scenario{Fault: "a relay in the worker's KV-event stream drops every third message for 8 s, then swaps every pair for 6 s",
		Rate: rate, Duration: dur.Seconds(), Recovery: map[string]float64{}, Extra: map[string]float64{}}
	s.record(t, "worker_events_dropped_and_reordered", sc)
	victim := s.urls[0]

	t0 := time.Now()
	results := make(chan []result, 1)
	go func() { results <- load(t.Context(), s, rate, dur) }()
	time.Sleep(dropAt)
	s.proxyMode(t, 3, false)
	time.Sleep(swapAt - dropAt)
	s.proxyMode(t, 0, true)
	time.Sleep(cleanAt - swapAt)
	s.proxyMode(t, 0, false)
	rs := <-results
	endAt := time.Now()

	// Every worker's credits against what it holds, the victim's and the
	// others' (the control: a difference there is not the relay's doing).
	agreed := map[string]time.Duration{}
	var diff string
	deadline := time.Now().Add(agreeMax)
	for len(agreed) < len(s.urls) {
		for _, u := range s.urls {
			if _, ok := agreed[u]; ok {
				continue
			}
			if diff = s.creditDiff(t, u); diff == "" {
				agreed[u] = time.Since(endAt)
			}
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(agreed) < len(s.urls) {
		t.Errorf("%v after the load: %s", agreeMax, diff)
	}
	sc.Recovery["load_end_to_credits_exact"] = round2(agreed[victim])

	st := s.proxyStats(t)
	eps, err := s.endpoints(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	ev := eps[victim].KV.Events
	sc.Extra["relay_received"], sc.Extra["relay_dropped"], sc.Extra["relay_swapped"] = float64(st.Received), float64(st.Dropped), float64(st.Swapped)
	sc.Extra["router_gaps"], sc.Extra["router_replays"] = float64(ev.Gaps), float64(ev.Replays)
	sc.Extra["router_lost_batches"], sc.Extra["router_restarts_seen"] = float64(ev.Lost), float64(ev.Restarts)
	sc.Extra["gpu_blocks_credited_at_end"] = float64(len(s.heldBlocks(t, victim)))
	sc.RouterRetries = s.retries(t)
	c := summarise(rs, t0.Add(dropAt))
	sc.counts = &c
	logFailures(t, t0, rs)
	t.Logf("relay: %d messages, %d dropped, %d pairs swapped; router: %d gaps, %d replays, %d batches lost, %d restarts seen; credits exact %.2fs after the load (%d GPU blocks)",
		st.Received, st.Dropped, st.Swapped, ev.Gaps, ev.Replays, ev.Lost, ev.Restarts, agreed[victim].Seconds(), int(sc.Extra["gpu_blocks_credited_at_end"]))

	if st.Dropped == 0 || st.Swapped == 0 {
		t.Fatalf("the relay dropped %d messages and swapped %d pairs: the scenario injected nothing", st.Dropped, st.Swapped)
	}
	if ev.Gaps == 0 || ev.Replays == 0 {
		t.Errorf("the router saw %d gaps and made %d replays, want both > 0: the loss went unseen", ev.Gaps, ev.Replays)
	}
	if ev.Restarts != 0 {
		t.Errorf("%d restarts seen, want 0: a late message taken for a restart drops the worker's whole index", ev.Restarts)
	}
	if ev.Lost != 0 {
		t.Errorf("%d batches lost: every gap was within the worker's replay buffer", ev.Lost)
	}
	if failed := c.Sent - c.Succeeded; failed != 0 {
		t.Errorf("%d of %d requests failed, want none: lost events cost routing, not requests", failed, c.Sent)
	}
	checkSent(t, sc.Sent, rate, dur)
}

// creditDiff compares the GPU blocks the router credits worker with against
// those the worker holds; "" when they are the same.
func (s *stack) creditDiff(t *testing.T, worker string) string {
	t.Helper()
	held := s.heldBlocks(t, worker)
	var v struct {
		Blocks []uint64 `json:"blocks"`
	}
	getJSON(t, s.workers[worker].URL+"/debug/kv/gpu", &v)
	has := map[uint64]bool{}
	for _, h := range v.Blocks {
		has[h] = true
	}
	var wrong int
	for _, h := range held {
		if !has[h] {
			wrong++
		}
		delete(has, h)
	}
	if wrong == 0 && len(has) == 0 {
		return ""
	}
	return fmt.Sprintf("the router credits %s with %d GPU blocks, %d of them not held; the worker holds %d, %d of them not credited",
		worker, len(held), wrong, len(v.Blocks), len(has))
}

// proxyMode sets the event relay's mode (eventproxy's POST /mode).
func (s *stack) proxyMode(t *testing.T, dropEvery int, swap bool) {
	t.Helper()
	u := fmt.Sprintf("%s/mode?drop_every=%d", s.proxy.URL, dropEvery)
	if swap {
		u += "&swap=1"
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: %s", u, resp.Status)
	}
}

// relayStats is eventproxy's GET /stats.
type relayStats struct {
	Received, Relayed, Dropped, Swapped uint64
}

func (s *stack) proxyStats(t *testing.T) relayStats {
	t.Helper()
	var v relayStats
	getJSON(t, s.proxy.URL+"/stats", &v)
	return v
}
