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
	var workers []string
	for range 2 {
		p := testnet.FreePortRun(t, 3, reserved)
		events := fmt.Sprintf(`{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:%d","replay_endpoint":"tcp://*:%d"}`, p+1, p+2)
		harness.StartProcess(ctx, t, bins["vllm-sim"], "--host", "127.0.0.1", "--port", strconv.Itoa(p), "--model", model,
			"--time-scale", "20", "--num-gpu-blocks-override", "600", "--max-model-len", "4096", "--log-level", "warn", "--kv-events-config", events,
			"--kv-transfer-config", `{"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both"}`)
		workers = append(workers, fmt.Sprintf("http://127.0.0.1:%d", p))
	}
	cp := testnet.FreePortRun(t, 3, reserved)
	harness.StartProcess(ctx, t, bins["cacheserver"], "--lm-listen", addr(cp), "--resp-listen", addr(cp+1), "--http-listen", addr(cp+2),
		"--memory-capacity-bytes", "67108864", "--log-level", "warn")
	rp := testnet.FreePortRun(t, 1, reserved)
	harness.StartProcess(ctx, t, bins["router"], "--listen", addr(rp), "--workers", strings.Join(workers, ","), "--strategy", "kvaware",
		"--kv-events-endpoint", "tcp://{host}:{port+1}", "--kv-events-replay-endpoint", "tcp://{host}:{port+2}", "--log-level", "warn")
	router := "http://" + addr(rp)
	cacheHTTP := "http://" + addr(cp+2)
	for _, u := range append([]string{router + "/ready", cacheHTTP + "/readyz"}, withSuffix(workers, "/health")...) {
		waitOK(ctx, t, u)
	}

	// Prometheus scrapes every second, with the labels a ServiceMonitor
	// would add.
	pp := testnet.FreePortRun(t, 1, reserved)
	var targets strings.Builder
	for job, hosts := range map[string][]string{"router": {addr(rp)}, "workers": hostsOf(workers), "cacheserver": {addr(cp + 2)}} {
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

	// Traffic for every panel: completions and chat, streamed and not,
	// repeated prompts (prefix and LMCache hits), a request the router
	// rejects, and objects through the cache server.
	traffic(ctx, t, router, cacheHTTP, model, 12*time.Second)

	harness.CheckDashboards(ctx, t, prom, filepath.Join("..", "..", "dashboards"))

	// Draw the dashboards from this data: docs/dashboards.md shows them
	// (WARMPATH_DASHBOARD_PNGS=docs/dashboards refreshes its images).
	pngs := os.Getenv("WARMPATH_DASHBOARD_PNGS")
	if pngs == "" {
		pngs = filepath.Join(dir, "png")
	} else if !filepath.IsAbs(pngs) {
		pngs = filepath.Join("..", "..", pngs)
	}
	render := exec.CommandContext(ctx, bins["dashrender"], "--prometheus", prom, "--dashboards", filepath.Join("..", "..", "dashboards"),
		"--out", pngs, "--window", "30s")
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

func traffic(ctx context.Context, t *testing.T, router, cache, model string, d time.Duration) {
	t.Helper()
	doc := strings.Repeat("The quarterly report covers revenue, costs and the outlook. ", 40)
	post := func(u, ct string, body []byte) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
		req.Header.Set("Content-Type", ct)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	put := func(u string, body []byte) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPut, u, bytes.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
	}
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	for w := range 3 {
		wg.Go(func() {
			for i := 0; time.Now().Before(end); i++ {
				doc := fmt.Sprintf("Document %d. %s", (w+i)%3, doc)
				c, _ := json.Marshal(map[string]any{"model": model, "prompt": doc + fmt.Sprintf(" Question %d?", i), "max_tokens": 8, "stream": i%2 == 0})
				post(router+"/v1/completions", "application/json", c)
				ch, _ := json.Marshal(map[string]any{"model": model, "max_tokens": 8, "messages": []map[string]string{{"role": "system", "content": doc}, {"role": "user", "content": fmt.Sprintf("Q%d", i)}}})
				post(router+"/v1/chat/completions", "application/json", ch)
				post(router+"/v1/completions", "application/json", []byte(`{"model":"no-such-model","prompt":"x"}`))
				key := fmt.Sprintf("%s/v1/objects/chunk-%d", cache, i%50)
				put(key, bytes.Repeat([]byte{byte(i)}, 64<<10))
				if resp, err := http.Get(key); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
		})
	}
	wg.Wait()
}
