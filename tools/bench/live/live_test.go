package live_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/warmpath/warmpath/tools/bench/live"
	"github.com/warmpath/warmpath/tools/vllmsim/app"
)

// startSim runs a simulated worker in-process on loopback.
func startSim(t *testing.T) string {
	t.Helper()
	o := app.DefaultOptions()
	o.Model = "m"
	o.TimeScale = 100
	o.HashSeed = "0"
	o.MaxModelLen = 4096
	o.NumGPUBlocksOverride = 1024
	ctx, cancel := context.WithCancel(context.Background())
	a, err := app.New(ctx, o)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Serve(ctx, ln, time.Second) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return "http://" + ln.Addr().String()
}

func TestRunMeasuresAndOrdersRounds(t *testing.T) {
	base := startSim(t)
	doc := "the cache keeps every block of a shared prefix warm "
	for range 6 {
		doc += doc
	}
	reqs := []live.Request{
		{After: -1, Prompt: doc + "first question", MaxTokens: 8, Session: "u1"},
		{After: 0, Think: 10 * time.Millisecond, Prompt: doc + "second question", MaxTokens: 8, Session: "u1"},
		{After: -1, Arrival: 5 * time.Millisecond, MaxTokens: 4, Messages: []live.Message{{Role: "system", Content: "be brief"}, {Role: "user", Content: "hello"}}},
	}
	before, err := live.Scrape(t.Context(), []string{base})
	if err != nil {
		t.Fatal(err)
	}
	var progress int
	res, err := live.Run(t.Context(), live.Config{BaseURL: base + "/v1/", Model: "m", Progress: func(done, total int) {
		progress = done
		if total != 3 {
			t.Errorf("progress total %d, want 3", total)
		}
	}}, reqs)
	if err != nil {
		t.Fatal(err)
	}
	if progress != 3 {
		t.Fatalf("progress reached %d, want 3", progress)
	}
	for i, r := range res {
		if r.Err != "" {
			t.Fatalf("request %d: %s", i, r.Err)
		}
		if r.TTFT <= 0 || r.E2E < r.TTFT || r.OutputTok != int64(reqs[i].MaxTokens) || r.PromptTok == 0 {
			t.Errorf("request %d measured %+v", i, r)
		}
	}
	// The second round waited for the first and hit its cached prefix.
	if res[1].Start < res[0].Start+res[0].E2E {
		t.Errorf("round 2 started at %v, before round 1 finished at %v", res[1].Start, res[0].Start+res[0].E2E)
	}
	if res[1].CachedTok == 0 || res[0].Dependents != 1 {
		t.Errorf("round 2 cached %d tokens (want > 0); round 1 dependents %d (want 1)", res[1].CachedTok, res[0].Dependents)
	}
	after, err := live.Scrape(t.Context(), []string{base})
	if err != nil {
		t.Fatal(err)
	}
	d := live.Delta(before, after)[base]
	if d[live.RequestsServed] != 3 || d[live.PrefixHits] < float64(res[1].CachedTok) || d[live.PrefixQueries] == 0 {
		t.Errorf("metric deltas %v, want 3 served and the cached tokens counted", d)
	}
}

func TestRunReportsErrors(t *testing.T) {
	base := startSim(t)
	res, err := live.Run(t.Context(), live.Config{BaseURL: base + "/v1/", Model: "no-such-model"},
		[]live.Request{{After: -1, Prompt: "x", MaxTokens: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Err == "" {
		t.Fatal("a request for an unknown model measured no error")
	}
	if _, err := live.Run(t.Context(), live.Config{BaseURL: base + "/v1/"}, []live.Request{{After: 3}}); err == nil {
		t.Fatal("a request waiting for a missing one was accepted")
	}
}
