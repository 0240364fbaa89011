package router

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warmpath/warmpath/libs/testnet"
	"github.com/warmpath/warmpath/tests/harness"
)

// sharedPrefixPrompts is the SGLang generated-shared-prefix workload, scaled
// down: groups × perGroup prompts, each the group's long system prompt plus
// a unique question, in round-robin order across groups.
func sharedPrefixPrompts(groups, perGroup int) []string {
	var out []string
	for p := range perGroup {
		for g := range groups {
			var sb strings.Builder
			for i := range 120 {
				fmt.Fprintf(&sb, "group %d system rule %d: answer carefully and cite sources. ", g, i)
			}
			fmt.Fprintf(&sb, "Question %d of group %d: what changed?", p, g)
			out = append(out, sb.String())
		}
	}
	return out
}

// sharedPrefixWorkers starts the four simulated workers the shared-prefix
// workload runs on, publishing KV events for kvaware.
func sharedPrefixWorkers(t *testing.T, strategyName string) []*worker {
	t.Helper()
	ws := make([]*worker, 4)
	for i := range ws {
		// A GPU cache of 8,000 tokens holds about 4.5 of the 1,700-token group prefixes.
		args := []string{"--num-gpu-blocks-override", "500", "--max-model-len", "4096", "--time-scale", "10"}
		if strategyName == "kvaware" {
			ws[i] = startEventWorker(t, testnet.FreePortRun(t, 3, nil), "map", args...)
		} else {
			ws[i] = startWorker(t, args...)
		}
	}
	return ws
}

type runResult struct {
	hitRate      float64
	maxOverMean  float64
	perWorkerHit []float64
}

// runWorkload sends prompts with fixed concurrency through a router using
// strategy, and measures the workers' prefix-cache hit rate (from their
// vllm:prefix_cache_* counters) and the balance of the router's in-flight
// requests per worker (time-averaged, max/mean).
func runWorkload(t *testing.T, strategyName string, prompts []string) runResult {
	t.Helper()
	ws := sharedPrefixWorkers(t, strategyName)
	args := []string{"--strategy", strategyName}
	if strategyName == "kvaware" {
		args = append(args, kvEvents()...)
	}
	r := startRouter(t, ws, args...)

	var sampleMu sync.Mutex
	inflight := map[string]float64{}
	samples := 0
	stop := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Add(1)
	go func() {
		defer sampler.Done()
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				n, err := r.inFlight()
				if err != nil {
					continue
				}
				sampleMu.Lock()
				for url, f := range n {
					inflight[url] += float64(f)
				}
				samples++
				sampleMu.Unlock()
			}
		}
	}()

	jobs := make(chan string)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := range jobs {
				b, _ := json.Marshal(map[string]any{"model": simModel, "prompt": p, "max_tokens": 8})
				resp, body := post(t, r.url+"/v1/completions", string(b))
				if resp.StatusCode != http.StatusOK {
					t.Errorf("status %d: %s", resp.StatusCode, body)
				}
			}
		}()
	}
	for _, p := range prompts {
		jobs <- p
	}
	close(jobs)
	wg.Wait()
	close(stop)
	sampler.Wait()

	var hits, queries, sum, mx float64
	res := runResult{}
	for _, w := range ws {
		h, q := w.metric(t, "vllm:prefix_cache_hits_total"), w.metric(t, "vllm:prefix_cache_queries_total")
		hits += h
		queries += q
		res.perWorkerHit = append(res.perWorkerHit, h/math.Max(q, 1))
		avg := inflight[w.url] / float64(samples)
		sum += avg
		mx = math.Max(mx, avg)
	}
	res.hitRate = hits / queries
	res.maxOverMean = mx / (sum / float64(len(ws)))
	return res
}

// TestPrefixAwareBeatsRoundRobin is the acceptance workload: on a
// shared-prefix workload over 4 simulated workers, prefixaware's hit rate
// clearly beats roundrobin's while the load stays balanced.
func TestPrefixAwareBeatsRoundRobin(t *testing.T) {
	// 11 groups: not a multiple of the worker count, so round robin cannot
	// partition groups by accident.
	prompts := sharedPrefixPrompts(11, 10)
	rr := runWorkload(t, "roundrobin", prompts)
	pa := runWorkload(t, "prefixaware", prompts)
	t.Logf("roundrobin: hit rate %.3f, in-flight max/mean %.2f, per worker %.2f", rr.hitRate, rr.maxOverMean, rr.perWorkerHit)
	t.Logf("prefixaware: hit rate %.3f, in-flight max/mean %.2f, per worker %.2f", pa.hitRate, pa.maxOverMean, pa.perWorkerHit)
	if !(pa.hitRate > rr.hitRate+0.15) {
		t.Errorf("prefixaware hit rate %.3f, want clearly above roundrobin's %.3f (+0.15)", pa.hitRate, rr.hitRate)
	}
	// The bound is 1.3. Under the race detector the clients and
	// the sampler run several times slower, so the sampled balance is
	// noisier. Measured when the router ran in the test process and under
	// the detector too (prefixaware 1.10–1.39 over runs, 1.05–1.19 without
	// it; kvaware, which also tokenizes in the router, 1.03–1.52 over 24
	// runs on 2026-11-26, the same before and after its affinity slack,
	// which prompts this short never earn). 1.6 stays above that tail and
	// below what a hot spot gives: with 8 requests over 4 workers, one
	// worker holding half of them is 2.0.
	bound := 1.3
	if raceEnabled {
		bound = 1.6
	}
	if pa.maxOverMean > bound {
		t.Errorf("prefixaware in-flight max/mean = %.2f, want ≤ %.2f", pa.maxOverMean, bound)
	}
	// kvaware on the same workload: cache-aware and balanced too. It does
	// not reliably beat prefixaware here — one router sees every placement
	// either way (measured 0.66–0.89 against 0.76–0.84) — its edge is what
	// prefixaware cannot see: TestKVAwareSeesWhatItDidNotRoute.
	kv := runWorkload(t, "kvaware", prompts)
	t.Logf("kvaware: hit rate %.3f, in-flight max/mean %.2f, per worker %.2f", kv.hitRate, kv.maxOverMean, kv.perWorkerHit)
	if !(kv.hitRate > rr.hitRate+0.15) {
		t.Errorf("kvaware hit rate %.3f, want clearly above roundrobin's %.3f (+0.15)", kv.hitRate, rr.hitRate)
	}
	if kv.maxOverMean > bound {
		t.Errorf("kvaware in-flight max/mean = %.2f, want ≤ %.2f", kv.maxOverMean, bound)
	}
}

func TestSessionStickiness(t *testing.T) {
	ws := []*worker{startWorker(t), startWorker(t), startWorker(t)}
	r := startRouter(t, ws, "--strategy", "session")
	count := func() []float64 {
		out := make([]float64, len(ws))
		for i, w := range ws {
			out[i] = w.metric(t, "vllm:request_success_total")
		}
		return out
	}
	for _, session := range []string{"alice", "bob", "carol"} {
		before := count()
		for i := range 5 {
			resp, body := post(t, r.url+"/v1/completions",
				fmt.Sprintf(`{"model":%q,"prompt":"turn %d","max_tokens":1}`, simModel, i), "X-Session-Id", session)
			if resp.StatusCode != 200 {
				t.Fatalf("%d %s", resp.StatusCode, body)
			}
		}
		after := count()
		moved := 0
		for i := range ws {
			if after[i] != before[i] {
				moved++
			}
		}
		if moved != 1 {
			t.Errorf("session %s spread over %d workers, want 1", session, moved)
		}
	}
	// The body's user field is the fallback key.
	before := count()
	for i := range 4 {
		post(t, r.url+"/v1/completions", fmt.Sprintf(`{"model":%q,"prompt":"u %d","max_tokens":1,"user":"dave"}`, simModel, i))
	}
	after, moved := count(), 0
	for i := range ws {
		if after[i] != before[i] {
			moved++
		}
	}
	if moved != 1 {
		t.Errorf("user-keyed session spread over %d workers, want 1", moved)
	}
}

// TestTracePropagation checks a span per request with the routing facts,
// exported over OTLP/HTTP, and that the worker receives the W3C
// traceparent of that span.
func TestTracePropagation(t *testing.T) {
	collector, otlpURL := harness.StartSpanReceiverHTTP(t)
	var mu sync.Mutex
	var seen []string
	w := startWorker(t)
	// A header-recording hop in front of the real worker.
	spy := &http.Server{Handler: http.HandlerFunc(func(rw http.ResponseWriter, req *http.Request) {
		if req.URL.Path == "/v1/completions" {
			mu.Lock()
			seen = append(seen, req.Header.Get("Traceparent"))
			mu.Unlock()
		}
		proxyTo(rw, req, w.url)
	})}
	spyW := serveSpy(t, spy)
	r := startRouter(t, []*worker{spyW}, "--otlp-endpoint", otlpURL)
	resp, body := post(t, r.url+"/v1/completions", `{"model":"`+simModel+`","prompt":"trace me","max_tokens":1}`,
		"Traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	shutdown(t, r) // the router flushes its spans as it exits
	var sp *harness.Span
	for _, s := range collector.Spans() {
		if hex.EncodeToString(s.TraceId) == "4bf92f3577b34da6a3ce929d0e0e4736" {
			sp = &s
		}
	}
	if sp == nil {
		t.Fatalf("no span of the caller's trace among the %d exported", len(collector.Spans()))
	}
	attrs := map[string]string{}
	for _, kv := range sp.Attributes {
		attrs[kv.Key] = kv.Value.String()
	}
	for _, k := range []string{"warmpath.strategy", "warmpath.worker", "warmpath.match_chunks"} {
		if attrs[k] == "" {
			t.Errorf("span lacks %s (attrs %v)", k, attrs)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 1 || !strings.HasPrefix(seen[0], "00-4bf92f3577b34da6a3ce929d0e0e4736-") || strings.Contains(seen[0], "00f067aa0ba902b7") {
		t.Errorf("worker saw traceparent %q, want the same trace with the router's span as parent", seen)
	}
}
