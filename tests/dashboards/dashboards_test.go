// Package dashboards checks the committed Grafana dashboards against the
// real thing: a router, two vllm-sim workers and the cache server on
// loopback, scraped by a real Prometheus (Debian's package). Every metric a
// panel queries must be one of the services' own, and every panel's query
// must return data.
package dashboards

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warmpath/warmpath/libs/gobuild"
	"github.com/warmpath/warmpath/libs/testnet"
	"github.com/warmpath/warmpath/tests/harness"
)

func TestDashboardsOnLiveServices(t *testing.T) {
	promBin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Fatal("prometheus not on PATH: run `make tools` (Debian's prometheus package)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir := t.TempDir()
	bins := buildAll(ctx, t, dir, map[string]string{
		"router":      "github.com/warmpath/warmpath/services/router/cmd/router",
		"vllm-sim":    "github.com/warmpath/warmpath/tools/cmd/vllm-sim",
		"cacheserver": "github.com/warmpath/warmpath/services/cacheserver/cmd/cacheserver",
		"dashrender":  "github.com/warmpath/warmpath/tools/cmd/dashrender",
	})

	const model = "dash/model"
	// Processes bind their ports only after starting, so a later run must
	// not overlap an earlier one.
	reserved := map[int]bool{}
	// Workers and the kvaware router hash LMCache chunks from one seed, so
	// a chunk one worker wrote to the L2 is found by the other.
	t.Setenv("PYTHONHASHSEED", "0")
	// A 1 GB LMCache L1 (32 chunks of this model's KV) holds less than the
	// traffic's documents, so chunks leave L1 and are read back from the L2.
	t.Setenv("LMCACHE_MAX_LOCAL_CPU_SIZE", "1")
	cp := testnet.FreePortRun(t, 4, reserved)
	harness.StartProcess(ctx, t, bins["cacheserver"], "--lm-listen", addr(cp), "--resp-listen", addr(cp+1), "--http-listen", addr(cp+2),
		"--kv-events-endpoint", fmt.Sprintf("tcp://*:%d", cp+3), "--memory-capacity-bytes", "134217728", "--log-level", "warn")
	var workers []string
	for range 2 {
		p := testnet.FreePortRun(t, 3, reserved)
		events := fmt.Sprintf(`{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:%d","replay_endpoint":"tcp://*:%d"}`, p+1, p+2)
		harness.StartProcess(ctx, t, bins["vllm-sim"], "--host", "127.0.0.1", "--port", strconv.Itoa(p), "--model", model,
			"--time-scale", "20", "--num-gpu-blocks-override", "600", "--max-model-len", "4096", "--log-level", "warn", "--kv-events-config", events,
			"--kv-transfer-config", `{"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both"}`, "--lmcache-remote-url", "lm://"+addr(cp))
		workers = append(workers, fmt.Sprintf("http://127.0.0.1:%d", p))
	}
	// Two routers over the same workers, so decisions of several strategies
	// reach the dashboards: kvaware (crediting GPU, L1 and the L2 from the
	// cache server's events) and roundrobin, which spreads each document
	// over both workers and so sends the second one to the L2 for it.
	rp := testnet.FreePortRun(t, 1, reserved)
	harness.StartProcess(ctx, t, bins["router"], "--listen", addr(rp), "--workers", strings.Join(workers, ","), "--strategy", "kvaware",
		"--kv-events-endpoint", "tcp://{host}:{port+1}", "--kv-events-replay-endpoint", "tcp://{host}:{port+2}",
		"--l2-events-endpoints", fmt.Sprintf("tcp://127.0.0.1:%d", cp+3), "--l2-snapshot-urls", "http://"+addr(cp+2), "--l2-hash-seed", "0",
		"--log-level", "warn")
	rrp := testnet.FreePortRun(t, 1, reserved)
	harness.StartProcess(ctx, t, bins["router"], "--listen", addr(rrp), "--workers", strings.Join(workers, ","), "--strategy", "roundrobin",
		"--log-level", "warn")
	routers := []string{"http://" + addr(rp), "http://" + addr(rrp)}
	cacheHTTP := "http://" + addr(cp+2)
	for _, u := range append(append(withSuffix(routers, "/ready"), cacheHTTP+"/readyz"), withSuffix(workers, "/health")...) {
		waitOK(ctx, t, u)
	}

	// Prometheus scrapes every second, with the labels a ServiceMonitor
	// would add.
	pp := testnet.FreePortRun(t, 1, reserved)
	var targets strings.Builder
	for job, hosts := range map[string][]string{"router": hostsOf(routers), "workers": hostsOf(workers), "cacheserver": {addr(cp + 2)}} {
		fmt.Fprintf(&targets, "  - job_name: %s\n    static_configs:\n      - targets: [%s]\n        labels: {namespace: test, endpoint: e2e}\n", job, strings.Join(hosts, ", "))
	}
	cfg := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfg, []byte("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n"+targets.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	harness.StartProcess(ctx, t, promBin, "--config.file="+cfg, "--storage.tsdb.path="+filepath.Join(dir, "tsdb"),
		"--web.listen-address="+addr(pp), "--log.level=warn")
	prom := "http://" + addr(pp)
	waitOK(ctx, t, prom+"/-/ready")
	waitScraped(ctx, t, prom, len(routers)+len(workers)+1)

	// Traffic for every panel: completions and chat, streamed and not,
	// repeated prompts (prefix, L1 and L2 hits), requests the router
	// rejects, and objects through the cache server.
	traffic(ctx, t, routers, cacheHTTP, model, 15*time.Second)

	harness.CheckDashboards(ctx, t, prom, filepath.Join("..", "..", "dashboards"))

	// Draw the dashboards from this data: docs/dashboards.md shows them
	// (WARMPATH_DASHBOARD_PNGS=docs/dashboards refreshes its images).
	pngs := os.Getenv("WARMPATH_DASHBOARD_PNGS")
	if pngs == "" {
		pngs = filepath.Join(dir, "png")
	} else if !filepath.IsAbs(pngs) {
		pngs = filepath.Join("..", "..", pngs)
	}
	// A 5 s rate window (5 scrapes) settles within the short run, where
	// the 20 s one the check uses would draw every rate as a ramp.
	render := exec.CommandContext(ctx, bins["dashrender"], "--prometheus", prom, "--dashboards", filepath.Join("..", "..", "dashboards"),
		"--out", pngs, "--window", "30s", "--rate-interval", "5s")
	out, err := render.CombinedOutput()
	if err != nil {
		t.Fatalf("dashrender: %v\n%s", err, out)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if strings.Contains(line, " 0 panels with data") {
			t.Errorf("dashrender drew a dashboard without data: %s", line)
		}
	}
	t.Logf("dashrender:\n%s", out)
}

// waitScraped waits until Prometheus has scraped n targets, so the
// rendered window holds the traffic from its first request: a loaded
// machine can take seconds from ready to the first scrape.
func waitScraped(ctx context.Context, t *testing.T, prom string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		got, err := harness.PromQuery(ctx, prom, "up == 1")
		if err == nil && got >= n {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("Prometheus scraped %d of %d targets (%v)", got, n, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func addr(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }

func withSuffix(urls []string, s string) []string {
	out := make([]string, len(urls))
	for i, u := range urls {
		out[i] = u + s
	}
	return out
}

func hostsOf(urls []string) []string {
	out := make([]string, len(urls))
	for i, u := range urls {
		out[i] = strings.TrimPrefix(u, "http://")
	}
	return out
}

func buildAll(ctx context.Context, t *testing.T, dir string, pkgs map[string]string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for name, pkg := range pkgs {
		bin := filepath.Join(dir, name)
		if err := gobuild.Build(ctx, "", pkg, bin); err != nil {
			t.Fatal(err)
		}
		out[name] = bin
	}
	return out
}

func waitOK(ctx context.Context, t *testing.T, u string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s never answered 200 (%v)", u, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// docs is how many documents the traffic asks about: more than one
// worker's GPU cache holds (600 blocks of 16 tokens), so prefixes leave the
// GPU and come back from LMCache's L1 or the L2.
const docs = 24

func traffic(ctx context.Context, t *testing.T, routers []string, cache, model string, d time.Duration) {
	t.Helper()
	doc := strings.Repeat("The quarterly report covers revenue, costs and the outlook. ", 60)
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	for w := range 4 {
		router := routers[w%len(routers)]
		wg.Go(func() {
			for i := 0; time.Now().Before(end); i++ {
				doc := fmt.Sprintf("Document %d. %s", (w*7+i)%docs, doc)
				c, _ := json.Marshal(map[string]any{"model": model, "prompt": doc + fmt.Sprintf(" Question %d?", i), "max_tokens": 8, "stream": i%2 == 0})
				post(ctx, router+"/v1/completions", c)
				ch, _ := json.Marshal(map[string]any{"model": model, "max_tokens": 8, "messages": []map[string]string{{"role": "system", "content": doc}, {"role": "user", "content": fmt.Sprintf("Q%d", i)}}})
				post(ctx, router+"/v1/chat/completions", ch)
				if i%4 == 0 { // errors by status: 404 unknown model, 400 malformed
					post(ctx, router+"/v1/completions", []byte(`{"model":"no-such-model","prompt":"x"}`))
					post(ctx, router+"/v1/completions", []byte(`{"model":`))
				}
				key := fmt.Sprintf("%s/v1/objects/chunk-%d", cache, i%50)
				put(ctx, key, bytes.Repeat([]byte{byte(i)}, 64<<10))
				get(ctx, key)
			}
		})
	}
	wg.Wait()
}

func post(ctx context.Context, u string, body []byte) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	drain(http.DefaultClient.Do(req))
}

func put(ctx context.Context, u string, body []byte) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPut, u, bytes.NewReader(body))
	drain(http.DefaultClient.Do(req))
}

func get(ctx context.Context, u string) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	drain(http.DefaultClient.Do(req))
}

func drain(resp *http.Response, err error) {
	if err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}
