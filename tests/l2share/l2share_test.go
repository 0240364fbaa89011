// Package l2share checks that simulated vLLM+LMCache workers share KV
// through warmpath's cache server, each in its own container on one Docker
// network: a prefix one worker computed is served to another from L2, over
// lm:// and over RESP, and a cache server that goes away is a miss, not an
// error.
package l2share

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/warmpath/warmpath/tests/harness"
)

const (
	simPkg   = "github.com/warmpath/warmpath/tools/cmd/vllm-sim"
	cachePkg = "github.com/warmpath/warmpath/services/cacheserver/cmd/cacheserver"
	model    = "meta-llama/Llama-3.1-8B-Instruct"
	// scale makes each stored chunk 32 MiB / 256 = 128 KiB.
	scale      = 256
	chunkBytes = 256 * 131072 / scale
)

func TestMain(m *testing.M) { harness.Main(m) }

func TestWorkersShareKVThroughCacheServer(t *testing.T) {
	nw := harness.NewNetwork(t)
	cache := harness.Start(t, harness.Spec{
		Package: cachePkg, Network: nw, Aliases: []string{"cache"},
		Args: []string{"--lm-listen", "0.0.0.0:65432", "--resp-listen", "0.0.0.0:6379", "--http-listen", "0.0.0.0:8080",
			"--memory-capacity-bytes", strconv.Itoa(256 << 20), "--log-format", "text"},
		Port: "8080", HealthPath: "/readyz",
	})

	for _, tc := range []struct{ name, url string }{
		{"lm", "lm://cache:65432"},
		{"resp", "redis://cache:6379"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := startSim(t, nw, tc.url), startSim(t, nw, tc.url)
			prompt := longPrompt(tc.name, 1500)

			first := a.complete(t, prompt)
			chunks := first.Usage.PromptTokens / 256
			a.waitMetric(t, "lmcache:num_remote_write_requests_total", float64(chunks))

			second := b.complete(t, prompt)
			if got, want := second.Usage.Details.CachedTokens, chunks*256; got != want {
				t.Errorf("worker b cached_tokens = %d, want %d from the cache server", got, want)
			}
			if got, want := b.metric(t, "lmcache:num_remote_read_bytes_total"), float64(chunks*chunkBytes); got != want {
				t.Errorf("worker b lmcache:num_remote_read_bytes_total = %v, want %v", got, want)
			}
			if got := b.metric(t, "warmpath_vllmsim_lmcache_remote_corrupt_total"); got != 0 {
				t.Errorf("%v corrupt chunks read back", got)
			}
			harness.CheckMetrics(t, b.get(t, "/metrics"))
		})
	}

	var stats struct {
		Tiers map[string]struct {
			Objects int64 `json:"objects"`
		} `json:"tiers"`
	}
	if err := json.Unmarshal(get(t, cache.URL+"/v1/stats"), &stats); err != nil {
		t.Fatal(err)
	}
	// Each run stores its prompt's chunks: one object a chunk over lm://,
	// two (kv_bytes and metadata) over RESP.
	if got := stats.Tiers["memory"].Objects; got < 3*5 {
		t.Errorf("cache server holds %d objects, want the chunks of both runs", got)
	}

	t.Run("cache server gone is a miss", func(t *testing.T) {
		a := startSim(t, nw, "lm://cache:65432")
		if err := cache.Stop(t.Context(), time.Second); err != nil {
			t.Fatal(err)
		}
		for i := range 2 {
			r := a.complete(t, longPrompt("after-stop-"+strconv.Itoa(i), 600))
			if r.Usage.PromptTokens == 0 {
				t.Fatal("no usage in the response")
			}
		}
		if got := a.metric(t, "warmpath_vllmsim_lmcache_remote_errors_total"); got < 1 {
			t.Errorf("remote errors = %v with the cache server stopped, want ≥ 1", got)
		}
	})
}

type sim struct{ base string }

func startSim(t *testing.T, nw *harness.Network, remote string) *sim {
	t.Helper()
	c := harness.Start(t, harness.Spec{
		Package: simPkg, Network: nw,
		Args: []string{"--host", "0.0.0.0", "--port", "8000", "--model", model, "--time-scale", "20",
			"--max-model-len", "4096", "--num-gpu-blocks-override", "1024",
			"--kv-transfer-config", `{"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both"}`,
			"--lmcache-remote-url", remote, "--lmcache-remote-scale", strconv.Itoa(scale), "--log-format", "text"},
		// L1 off: every external hit must come from the cache server.
		Env:  map[string]string{"PYTHONHASHSEED": "0", "LMCACHE_LOCAL_CPU": "false"},
		Port: "8000", HealthPath: "/health",
	})
	return &sim{base: c.URL}
}

type completion struct {
	Usage struct {
		PromptTokens int `json:"prompt_tokens"`
		Details      struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
}

func (s *sim) complete(t *testing.T, prompt string) completion {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"model": model, "prompt": prompt, "max_tokens": 4})
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.base+"/v1/completions", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /v1/completions = %d %s", resp.StatusCode, b)
	}
	var c completion
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	return c
}

func (s *sim) get(t *testing.T, path string) []byte { return get(t, s.base+path) }

func get(t *testing.T, url string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s = %d %v", url, resp.StatusCode, err)
	}
	return b
}

// metric returns the sum of name's samples in the worker's /metrics.
func (s *sim) metric(t *testing.T, name string) float64 {
	t.Helper()
	sum, found, err := harness.SumSamples(s.get(t, "/metrics"), name)
	if err != nil {
		t.Fatal(err)
	}
	if !found {
		t.Fatalf("metric %s not exported", name)
	}
	return sum
}

// waitMetric waits for the background L2 writer to catch up.
func (s *sim) waitMetric(t *testing.T, name string, atLeast float64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		v := s.metric(t, name)
		if v >= atLeast {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s = %v, want ≥ %v", name, v, atLeast)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// longPrompt is about n tokens of text unique to seed.
func longPrompt(seed string, n int) string {
	var sb strings.Builder
	for i := 0; sb.Len() < n*5; i++ {
		fmt.Fprintf(&sb, "%s document line %d talks about routing and caching. ", seed, i)
	}
	return sb.String()
}
