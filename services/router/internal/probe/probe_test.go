package probe

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = ParseMetrics(b)
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
