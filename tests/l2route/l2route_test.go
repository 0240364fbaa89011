// Package l2route checks that the router knows what the shared L2 holds
// from the cache server's own event stream and routes on it: a prompt only
// the cache server holds (a worker outside the router computed it) is
// credited to every worker as L2 blocks, goes to the idle one, and that
// worker fetches it from the L2 instead of prefilling it.
package l2route

import (
	"bufio"
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
	simPkg    = "github.com/warmpath/warmpath/tools/cmd/vllm-sim"
	cachePkg  = "github.com/warmpath/warmpath/services/cacheserver/cmd/cacheserver"
	routerPkg = "github.com/warmpath/warmpath/services/router/cmd/router"
	model     = "meta-llama/Llama-3.1-8B-Instruct"
	seed      = "0" // every worker's PYTHONHASHSEED, and the router's --l2-hash-seed
	chunk     = 256
	blockSize = 16 // the simulator's vLLM block size
)

func TestMain(m *testing.M) { harness.Main(m) }

// TestRouterCreditsWhatTheL2Holds runs once with the cache server named
// to the router and once found by DNS, as a router finds the cache
// servers of a Kubernetes cluster (the headless peers Service: every
// server's address under one name; here Docker's DNS for the alias).
func TestRouterCreditsWhatTheL2Holds(t *testing.T) {
	for _, tt := range []struct {
		name string
		args []string
	}{
		{"listed", []string{"--l2-events-endpoints", "tcp://cache:5557", "--l2-snapshot-urls", "http://cache:8080"}},
		{"dns", []string{"--l2-dns-name", "cache", "--l2-dns-http-port", "8080", "--l2-dns-events-port", "5557"}},
	} {
		t.Run(tt.name, func(t *testing.T) { routerCreditsWhatTheL2Holds(t, tt.args) })
	}
}

func routerCreditsWhatTheL2Holds(t *testing.T, l2Args []string) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	nw := harness.NewNetwork(t)
	harness.Start(t, harness.Spec{
		Package: cachePkg, Network: nw, Aliases: []string{"cache"},
		Args: []string{"--lm-listen", "0.0.0.0:65432", "--http-listen", "0.0.0.0:8080",
			"--memory-capacity-bytes", strconv.Itoa(256 << 20), "--kv-events-endpoint", "tcp://*:5557", "--log-format", "text"},
		Port: "8080", HealthPath: "/readyz",
	})
	workers := map[string]*worker{}
	var urls []string
	for _, alias := range []string{"sim-a", "sim-b"} {
		u := "http://" + alias + ":8000"
		urls = append(urls, u)
		workers[u] = startSim(t, nw, alias)
	}
	outsider := startSim(t, nw, "sim-c") // shares the L2, not behind the router
	router := harness.Start(t, harness.Spec{
		Package: routerPkg, Network: nw, Aliases: []string{"router"},
		Args: append([]string{"--listen", "0.0.0.0:8080", "--workers", strings.Join(urls, ","), "--strategy", "kvaware",
			"--kv-events-endpoint", "tcp://{host}:{port+1}", "--kv-events-replay-endpoint", "tcp://{host}:{port+2}",
			"--l2-hash-seed", seed, "--l2-chunk-tokens", strconv.Itoa(chunk),
			"--health-interval", "500ms", "--scrape-interval", "200ms", "--log-format", "text"}, l2Args...),
		Port: "8080", HealthPath: "/ready",
	})
	r := &client{base: router.URL}
	waitFor(t, ctx, "the router's workers and its L2 stream", func() (bool, string) {
		d := r.debug(t, ctx)
		ok := len(d.L2.Servers) == 1 && d.L2.Servers[0].Connected
		for _, e := range d.Endpoints {
			ok = ok && e.Healthy && len(e.Models) > 0
		}
		return ok && len(d.Endpoints) == 2, fmt.Sprintf("%+v", d)
	})

	// Only the L2 holds the prompt: the outsider computed and stored it.
	prompt := longPrompt("l2route", 2048)
	first := outsider.complete(t, ctx, prompt)
	chunks := first.Usage.PromptTokens / chunk
	if chunks < 4 {
		t.Fatalf("prompt of %d tokens: too short", first.Usage.PromptTokens)
	}
	waitFor(t, ctx, "the outsider's L2 writes", func() (bool, string) {
		v := outsider.metric(t, ctx, "lmcache:num_remote_write_requests_total")
		return v >= float64(chunks), fmt.Sprint(v)
	})
	waitFor(t, ctx, "the router's L2 view", func() (bool, string) {
		d := r.debug(t, ctx)
		return len(d.L2.Servers) == 1 && d.L2.Servers[0].Chunks >= chunks, fmt.Sprintf("%+v", d.L2)
	})

	// One worker busy with a long stream; the other idle.
	busyCtx, stopBusy := context.WithCancel(ctx)
	defer stopBusy()
	busyDone := make(chan struct{})
	go func() { defer close(busyDone); r.stream(busyCtx, longPrompt("busy", 100), 3000) }()
	var busy string
	waitFor(t, ctx, "the busy stream in flight", func() (bool, string) {
		d := r.debug(t, ctx)
		for _, e := range d.Endpoints {
			if e.InFlight > 0 {
				busy = e.URL
			}
		}
		return busy != "", fmt.Sprintf("%+v", d.Endpoints)
	})
	idle := urls[0]
	if busy == idle {
		idle = urls[1]
	}

	second := r.complete(t, ctx, prompt)
	select {
	case <-busyDone:
		t.Fatal("the busy stream ended before the prompt was routed: the test shows nothing about load")
	default:
	}
	stopBusy()
	if got, want := second.Usage.Details.CachedTokens, chunks*chunk; got != want {
		t.Errorf("cached_tokens through the router = %d, want %d from the L2", got, want)
	}
	credited := r.creditedL2(t, ctx)
	t.Logf("prompt %d tokens (%d chunks); busy %s, idle %s; L2 blocks credited %v; cached_tokens %d",
		first.Usage.PromptTokens, chunks, busy, idle, credited, second.Usage.Details.CachedTokens)
	// The idle worker holds none of it: every one of the prompt's chunks
	// is credited as L2, in the worker's 16-token blocks.
	if want := float64(chunks * chunk / blockSize); credited != want {
		t.Errorf(`warmpath_router_credited_blocks_total{strategy="kvaware",tier="l2"} = %v, want %v`, credited, want)
	}
	if v := workers[idle].metric(t, ctx, "lmcache:num_remote_read_requests_total"); v < float64(chunks) {
		t.Errorf("idle worker %s read %v chunks from the L2, want ≥ %d", idle, v, chunks)
	}
	if v := workers[busy].metric(t, ctx, "lmcache:num_remote_read_requests_total"); v != 0 {
		t.Errorf("busy worker %s read %v chunks from the L2: the prompt went to it", busy, v)
	}
}

type worker struct{ client }

func startSim(t *testing.T, nw *harness.Network, alias string) *worker {
	t.Helper()
	events := `{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:8001","replay_endpoint":"tcp://*:8002"}`
	c := harness.Start(t, harness.Spec{
		Package: simPkg, Network: nw, Aliases: []string{alias},
		Args: []string{"--host", "0.0.0.0", "--port", "8000", "--model", model, "--time-scale", "1",
			"--max-model-len", "8192", "--num-gpu-blocks-override", "2048",
			"--kv-transfer-config", `{"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both"}`,
			"--kv-events-config", events,
			"--lmcache-remote-url", "lm://cache:65432", "--lmcache-remote-scale", "256", "--log-format", "text"},
		// L1 off: every external hit comes from the cache server.
		Env:  map[string]string{"PYTHONHASHSEED": seed, "LMCACHE_LOCAL_CPU": "false"},
		Port: "8000", HealthPath: "/health",
	})
	return &worker{client{base: c.URL}}
}

type client struct{ base string }

type completion struct {
	Usage struct {
		PromptTokens int `json:"prompt_tokens"`
		Details      struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
}

func (c *client) post(ctx context.Context, body map[string]any) (*http.Response, error) {
	b, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/v1/completions", bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	return http.DefaultClient.Do(req)
}

func (c *client) complete(t *testing.T, ctx context.Context, prompt string) completion {
	t.Helper()
	resp, err := c.post(ctx, map[string]any{"model": model, "prompt": prompt, "max_tokens": 4})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s/v1/completions = %d %s", c.base, resp.StatusCode, b)
	}
	var out completion
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// stream runs a long streamed completion until it ends or ctx does.
func (c *client) stream(ctx context.Context, prompt string, maxTokens int) {
	resp, err := c.post(ctx, map[string]any{"model": model, "prompt": prompt, "max_tokens": maxTokens, "stream": true, "ignore_eos": true})
	if err != nil {
		return
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
	}
}

func (c *client) get(t *testing.T, ctx context.Context, path string) []byte {
	t.Helper()
	gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	b, err := harness.GetBody(gctx, c.base+path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (c *client) metric(t *testing.T, ctx context.Context, name string) float64 {
	t.Helper()
	sum, found, err := harness.SumSamples(c.get(t, ctx, "/metrics"), name)
	if err != nil || !found {
		t.Fatalf("metric %s: found %v, %v", name, found, err)
	}
	return sum
}

// creditedL2 is the router's L2 blocks credited by kvaware.
func (c *client) creditedL2(t *testing.T, ctx context.Context) float64 {
	t.Helper()
	// Absent until kvaware first credits an L2 block: 0.
	v, _, err := harness.SumSamples(c.get(t, ctx, "/metrics"), `warmpath_router_credited_blocks_total{strategy="kvaware",tier="l2"}`)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

type debugEndpoints struct {
	Endpoints []struct {
		URL      string   `json:"url"`
		Healthy  bool     `json:"healthy"`
		InFlight int      `json:"inFlight"`
		Models   []string `json:"models"`
	} `json:"endpoints"`
	L2 struct {
		Servers []struct {
			Connected bool  `json:"connected"`
			Chunks    int   `json:"chunks"`
			LastSeq   int64 `json:"lastSeq"`
		} `json:"servers"`
	} `json:"l2"`
}

func (c *client) debug(t *testing.T, ctx context.Context) debugEndpoints {
	t.Helper()
	var d debugEndpoints
	if err := json.Unmarshal(c.get(t, ctx, "/debug/endpoints"), &d); err != nil {
		t.Fatal(err)
	}
	return d
}

func waitFor(t *testing.T, ctx context.Context, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("timed out waiting for %s: %s", what, state)
		}
		time.Sleep(50 * time.Millisecond)
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
