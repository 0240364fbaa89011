package faults

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/warmpath/warmpath/libs/zmtpguard/zmtptest"
)

// TestRouterHostileEventPeers connects to the router's own KV-event SUB
// socket (the bind topology, where workers connect to it) from the test and,
// in four rounds 2 s apart beside steady load, announces ZMTP frames of 4 GiB
// and 1 TiB, before the handshake (as a command) and after it (as a
// message), eight connections of each, and leaves four more connections
// mid-greeting. The router must drop every announcing connection without
// allocating what it announced, keep serving requests and keep applying the
// well-behaved workers' events, and its memory must stay bounded.
func TestRouterHostileEventPeers(t *testing.T) {
	s := startBindStack(t)
	const (
		rate     = 4.0
		dur      = 20 * time.Second
		attackAt = 4 * time.Second
		rounds   = 4
		each     = 8
		rssBound = 256 << 20
	)
	sc := &scenario{Fault: "hostile peers on the router's KV-event SUB socket: oversize ZMTP frames, stalled greetings",
		Rate: rate, Duration: dur.Seconds(), Recovery: map[string]float64{}, Extra: map[string]float64{}}
	s.record(t, "router_hostile_event_peers", sc)

	ctx := t.Context()
	addr, err := s.router.Endpoint(ctx, eventsBindPort)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	results := make(chan []result, 1)
	go func() { results <- load(ctx, s, rate, dur) }()
	// The workers' events arrive, through the bind socket, before the attack.
	s.waitMetric(t, "warmpath_router_kv_events_total", attackAt, func(v float64) bool { return v > 0 })
	time.Sleep(time.Until(t0.Add(attackAt)))
	rssBefore := s.metric(t, "process_resident_memory_bytes")
	eventsBefore := s.metric(t, "warmpath_router_kv_events_total")
	attackStart := time.Now()
	var peak float64
	kept, sent := 0, 0
	var stalled []net.Conn
	for round := range rounds {
		for _, a := range zmtptest.OversizeAttacks() {
			for range each {
				sent++
				if !strikeRouter(t, addr, a) {
					kept++
					t.Errorf("round %d, %s: the router kept a connection that announced an oversize frame", round, a.Name)
				}
			}
		}
		for range 4 {
			c, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = c.Write(zmtptest.Greeting()[:10]) // a greeting cut short, held open
			stalled = append(stalled, c)
		}
		peak = max(peak, s.metric(t, "process_resident_memory_bytes"))
		time.Sleep(2 * time.Second)
	}
	for _, c := range stalled {
		_ = c.Close()
	}
	// The well-behaved workers' events kept coming during the attack.
	eventsAfter := s.metric(t, "warmpath_router_kv_events_total")
	rs := <-results
	oversize := s.metric(t, "warmpath_router_kv_events_oversize_frames_total")

	sc.RouterRetries = s.retries(t)
	c := summarise(rs, attackStart)
	sc.counts = &c
	sc.Extra["hostile_connections"] = float64(sent)
	sc.Extra["hostile_connections_kept"] = float64(kept)
	sc.Extra["stalled_greetings"] = float64(len(stalled))
	sc.Extra["oversize_frames_counted"] = oversize
	sc.Extra["worker_events_during_attack"] = eventsAfter - eventsBefore
	sc.Extra["rss_before_bytes"] = rssBefore
	sc.Extra["rss_peak_bytes"] = peak
	logFailures(t, t0, rs)
	t.Logf("%d hostile connections (%d kept), %d stalled greetings; %v oversize frames counted; %v worker events applied during the attack; RSS %.0f MiB before, %.0f MiB at its peak",
		sent, kept, len(stalled), oversize, eventsAfter-eventsBefore, rssBefore/(1<<20), peak/(1<<20))

	if failed := c.Sent - c.Succeeded; failed != 0 {
		t.Errorf("%d of %d requests failed, want none", failed, c.Sent)
	}
	if oversize < float64(sent) {
		t.Errorf("the router counted %v oversize frames, want the %d it was sent", oversize, sent)
	}
	if eventsAfter <= eventsBefore {
		t.Errorf("no worker event applied during the attack (%v before, %v after)", eventsBefore, eventsAfter)
	}
	if peak > rssBound {
		t.Errorf("router RSS reached %.0f MiB, want under %d MiB", peak/(1<<20), rssBound>>20)
	}
	checkSent(t, sc.Sent, rate, dur)
}

// strikeRouter sends a on a new connection to addr and reports whether the
// router hung up within 5 s.
func strikeRouter(t *testing.T, addr string, a zmtptest.Attack) bool {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write(a.Payload); err != nil {
		return true // already closed on us
	}
	if err := conn.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	_, err = io.Copy(io.Discard, conn)
	var ne net.Error
	return !errors.As(err, &ne) || !ne.Timeout()
}
