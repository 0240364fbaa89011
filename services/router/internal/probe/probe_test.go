package probe

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warmpath/warmpath/libs/testlog"
	"github.com/warmpath/warmpath/libs/testwait"
	"github.com/warmpath/warmpath/services/router/internal/pool"
)

func TestParseMetrics(t *testing.T) {
	body := []byte(`# HELP vllm:num_requests_running x
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3
vllm:num_requests_running{engine="1",model_name="m"} 2
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 4
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.5
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",num_gpu_blocks="1000",enable_prefix_caching="True"} 1
`)
	s, err := ParseMetrics(body)
	if err != nil {
		t.Fatal(err)
	}
	if s.Running != 5 || s.Waiting != 4 || s.KVCacheUsage != 0.5 || s.BlockSize != 16 || s.NumGPUBlocks != 1000 {
		t.Fatalf("got %+v", s)
	}
	legacy, err := ParseMetrics([]byte("vllm:gpu_cache_usage_perc 0.75\n"))
	if err != nil || legacy.KVCacheUsage != 0.75 {
		t.Fatalf("legacy gauge: %+v %v", legacy, err)
	}
	if _, err := ParseMetrics([]byte("not { metrics")); err == nil {
		t.Fatal("garbage parsed")
	}
}

// FuzzParseMetrics: worker /metrics bodies are untrusted input.
func FuzzParseMetrics(f *testing.F) {
	f.Add([]byte("vllm:num_requests_running 1\n"))
	f.Add([]byte(`vllm:cache_config_info{block_size="16",num_gpu_blocks="x"} 1` + "\n"))
	f.Add([]byte("lmcache:num_hit_tokens_total{worker_id=\"0\"} 5\nlmcache:num_requested_tokens_total 9\nlmcache:local_cache_usage -1\nvllm:prefix_cache_hits_total 1e308\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := ParseMetrics(b)
		if err != nil {
			return
		}
		// A status line from the scrape, against none and against itself.
		for _, since := range []pool.Stats{{}, s} {
			for _, a := range statusAttrs("w", since, s) {
				if strings.HasSuffix(a.Key, "_hit_rate") && (math.IsNaN(a.Value.Float64()) || math.IsInf(a.Value.Float64(), 0)) {
					t.Fatalf("%s = %v", a.Key, a.Value)
				}
			}
		}
	})
}

// restarts records Observer.Restarted calls.
type restarts struct {
	mu      sync.Mutex
	reasons []string
}

func (r *restarts) HealthChanged(*pool.Endpoint, bool) {}

func (r *restarts) Restarted(_ *pool.Endpoint, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reasons = append(r.reasons, reason)
}

func (r *restarts) got() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.reasons)
}

// TestRestartDetected: a worker whose health check fails and passes again,
// or whose process start time changes, is reported restarted; its first
// passing check and steady scrapes are not.
func TestRestartDetected(t *testing.T) {
	var up atomic.Bool
	var start atomic.Int64
	up.Store(true)
	start.Store(1000)
	worker := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/health":
			if !up.Load() {
				w.WriteHeader(http.StatusServiceUnavailable)
			}
		case "/v1/models":
			_, _ = io.WriteString(w, `{"data":[{"id":"m"}]}`)
		case "/metrics":
			fmt.Fprintf(w, "process_start_time_seconds %d\n", start.Load())
		}
	}))
	defer worker.Close()
	obs := &restarts{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := New(ctx, Config{HealthInterval: 10 * time.Millisecond, ScrapeInterval: 10 * time.Millisecond}, nil, obs, nil)
	ep := pool.NewEndpoint(worker.URL, "")
	p.Start(ep)
	defer func() { cancel(); p.Wait() }()

	testwait.For(t, 5*time.Second, "the first scrape", func() bool { return ep.Stats().ProcessStart == 1000 })
	// Steady for a few more rounds of checks and scrapes: no restart.
	scraped := ep.Stats().ScrapedAt
	testwait.For(t, 5*time.Second, "two more scrapes", func() bool { return ep.Stats().ScrapedAt.After(scraped.Add(15 * time.Millisecond)) })
	if got := obs.got(); len(got) != 0 {
		t.Fatalf("restarts %v on a steady worker", got)
	}

	start.Store(2000)
	testwait.For(t, 5*time.Second, "a restart on a new process start time", func() bool { return len(obs.got()) == 1 })
	if got := obs.got()[0]; got != RestartProcessStart {
		t.Fatalf("reason %q, want %q", got, RestartProcessStart)
	}

	up.Store(false)
	testwait.For(t, 5*time.Second, "the failed check", func() bool { return !ep.Healthy() })
	up.Store(true)
	testwait.For(t, 5*time.Second, "a restart on health returning", func() bool { return len(obs.got()) == 2 })
	if got := obs.got()[1]; got != RestartHealthReturned {
		t.Fatalf("reason %q, want %q", got, RestartHealthReturned)
	}
}

// TestParseMetricsCaches: the prefix cache and LMCache counters are read,
// summed over label sets; a worker without LMCache has none.
func TestParseMetricsCaches(t *testing.T) {
	s, err := ParseMetrics([]byte(`# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 300
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 1000
# TYPE lmcache:num_hit_tokens_total counter
lmcache:num_hit_tokens_total{model_name="m",worker_id="0"} 40
lmcache:num_hit_tokens_total{model_name="m",worker_id="1"} 20
# TYPE lmcache:num_requested_tokens_total counter
lmcache:num_requested_tokens_total{model_name="m",worker_id="0"} 100
# TYPE lmcache:local_cache_usage gauge
lmcache:local_cache_usage{model_name="m",worker_id="0"} 5e+09
`))
	if err != nil {
		t.Fatal(err)
	}
	want := pool.LMCacheStats{Retrieves: pool.HitCounters{Hits: 60, Queries: 100}, LocalUsageBytes: 5e9, HasLocalUsage: true}
	if s.PrefixCache != (pool.HitCounters{Hits: 300, Queries: 1000}) || s.LMCache == nil || *s.LMCache != want {
		t.Fatalf("got prefix %+v, lmcache %+v", s.PrefixCache, s.LMCache)
	}
	plain, err := ParseMetrics([]byte("vllm:num_requests_running 1\n"))
	if err != nil || plain.LMCache != nil {
		t.Fatalf("a worker without LMCache: %+v %v", plain.LMCache, err)
	}
}

// TestStatusAttrs: a worker cache status line's hit rates are over the
// time between two scrapes, restart at a counter that went back, and are
// left out when nothing was asked of the cache.
func TestStatusAttrs(t *testing.T) {
	t0 := time.Unix(1000, 0)
	lm := func(hits, req float64) *pool.LMCacheStats {
		return &pool.LMCacheStats{Retrieves: pool.HitCounters{Hits: hits, Queries: req}}
	}
	tests := []struct {
		name        string
		since, cur  pool.Stats
		want        map[string]float64 // fields that must be present
		absent      []string
		wantWindow  float64
		wantRunning int
	}{
		{"deltas over the interval",
			pool.Stats{ScrapedAt: t0, PrefixCache: pool.HitCounters{Hits: 100, Queries: 400}, LMCache: lm(50, 100)},
			pool.Stats{ScrapedAt: t0.Add(time.Minute), Running: 3, KVCacheUsage: 0.5, PrefixCache: pool.HitCounters{Hits: 400, Queries: 1000}, LMCache: lm(80, 200)},
			map[string]float64{"gpu_prefix_hit_rate": 0.5, "gpu_prefix_hit_tokens": 300, "lmcache_hit_rate": 0.3, "lmcache_requested_tokens": 100, "gpu_kv_cache_usage": 0.5},
			[]string{"lmcache_local_cache_usage_bytes"}, 60, 3},
		{"the worker restarted: counted since its start",
			pool.Stats{ScrapedAt: t0, LMCache: lm(500, 1000)},
			pool.Stats{ScrapedAt: t0.Add(time.Minute), LMCache: lm(10, 40)},
			map[string]float64{"lmcache_hit_rate": 0.25, "lmcache_requested_tokens": 40},
			[]string{"gpu_prefix_hit_rate"}, 60, 0},
		{"nothing asked of LMCache", pool.Stats{ScrapedAt: t0, LMCache: lm(5, 10)},
			pool.Stats{ScrapedAt: t0.Add(time.Second), LMCache: &pool.LMCacheStats{Retrieves: pool.HitCounters{Hits: 5, Queries: 10}, LocalUsageBytes: 2048, HasLocalUsage: true}},
			map[string]float64{"lmcache_requested_tokens": 0, "lmcache_local_cache_usage_bytes": 2048},
			[]string{"lmcache_hit_rate"}, 1, 0},
		{"LMCache first seen after the baseline", pool.Stats{ScrapedAt: t0},
			pool.Stats{ScrapedAt: t0.Add(time.Second), LMCache: lm(3, 4)},
			map[string]float64{"lmcache_hit_rate": 0.75}, nil, 1, 0},
		{"no LMCache", pool.Stats{ScrapedAt: t0}, pool.Stats{ScrapedAt: t0.Add(time.Second), Waiting: 2},
			map[string]float64{"waiting": 2}, []string{"lmcache_hit_tokens", "lmcache_requested_tokens"}, 1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := map[string]slog.Value{}
			for _, a := range statusAttrs("http://w", tt.since, tt.cur) {
				got[a.Key] = a.Value
			}
			if got["worker"].String() != "http://w" || got["window_seconds"].Float64() != tt.wantWindow || got["running"].Int64() != int64(tt.wantRunning) {
				t.Fatalf("fields %v", got)
			}
			for k, v := range tt.want {
				g, ok := got[k]
				if !ok {
					t.Fatalf("no %s in %v", k, got)
				}
				f := g.Any()
				if i, isInt := f.(int64); isInt {
					f = float64(i)
				}
				if f != v {
					t.Errorf("%s = %v, want %v", k, f, v)
				}
			}
			for _, k := range tt.absent {
				if _, ok := got[k]; ok {
					t.Errorf("%s present: %v", k, got)
				}
			}
		})
	}
}

// TestStatusLine: a healthy worker's status line carries LMCache's hit
// rate over the interval, from the counters of two scrapes.
func TestStatusLine(t *testing.T) {
	// Every scrape adds 100 requested and 25 hit tokens: a quarter, over
	// any interval.
	var scrapes atomic.Int64
	worker := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/models":
			_, _ = io.WriteString(w, `{"data":[{"id":"m"}]}`)
		case "/metrics":
			n := scrapes.Add(1)
			fmt.Fprintf(w, "vllm:kv_cache_usage_perc 0.5\nvllm:num_requests_running 2\nlmcache:num_requested_tokens_total %d\nlmcache:num_hit_tokens_total %d\nlmcache:local_cache_usage 4096\n", 100*n, 25*n)
		}
	}))
	defer worker.Close()
	log, rec := testlog.New(slog.LevelInfo)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := New(ctx, Config{HealthInterval: 10 * time.Millisecond, ScrapeInterval: 10 * time.Millisecond, StatusInterval: 50 * time.Millisecond}, nil, nil, log)
	ep := pool.NewEndpoint(worker.URL, "")
	p.Start(ep)
	defer func() { cancel(); p.Wait() }()

	var lines []testlog.Line
	testwait.For(t, 5*time.Second, "two status lines", func() bool {
		lines = testlog.WithMsg(rec.Lines(), "worker cache status")
		return len(lines) >= 2
	})
	for _, l := range lines {
		rate, ok := l.Number("lmcache_hit_rate")
		req, _ := l.Number("lmcache_requested_tokens")
		usage, _ := l.Number("gpu_kv_cache_usage")
		local, _ := l.Number("lmcache_local_cache_usage_bytes")
		if !ok || rate != 0.25 || req <= 0 || usage != 0.5 || local != 4096 || l.String("worker") != worker.URL || l.Level() != "INFO" {
			t.Fatalf("status line %v", l)
		}
	}
	if models := testlog.WithMsg(rec.Lines(), "worker models"); len(models) != 1 {
		t.Fatalf("worker models lines %v, want one", models)
	}
}
