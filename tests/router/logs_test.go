package router

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/warmpath/warmpath/libs/testlog"
	"github.com/warmpath/warmpath/libs/testnet"
	"github.com/warmpath/warmpath/libs/testwait"
)

// TestLogsVerifyRouting reads the router's JSON log as docs/router.md
// ("Verify routing from the logs") tells an operator to: each worker
// registered and subscribed to, a routed line per request (sampled at
// INFO, here at a rate above the requests') naming the strategy, worker
// and match — the first of a prompt falling back for want of any cached
// prefix, its repeat matched — and a worker cache status line per worker
// with what was scraped from it, LMCache included.
func TestLogsVerifyRouting(t *testing.T) {
	lmcache := []string{"--kv-transfer-config", `{"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both"}`}
	ws := []*worker{
		startEventWorker(t, testnet.FreePortRun(t, 3, nil), "map", lmcache...),
		startEventWorker(t, testnet.FreePortRun(t, 3, nil), "map", lmcache...),
	}
	r := startRouter(t, ws, append(kvEvents(), "--strategy", "kvaware",
		"--log-format", "json", "--log-level", "info", "--log-routed-per-second", "100", "--log-worker-status-interval", "1s")...)
	urls := []string{ws[0].url, ws[1].url}

	prompt := func(g int) string {
		var b strings.Builder
		for i := range 40 {
			fmt.Fprintf(&b, "tenant %d policy clause %d: keep records for audit. ", g, i)
		}
		return b.String()
	}
	// Each prompt twice: the first finds nothing cached, the second what
	// the first left. Spaced beyond the sample's 10 ms, so every one is
	// logged at INFO.
	var ids []string
	for g := range 2 {
		for rep := range 2 {
			id := fmt.Sprintf("logs-%d-%d", g, rep)
			b, _ := json.Marshal(map[string]any{"model": simModel, "prompt": prompt(g), "max_tokens": 2})
			if resp, body := post(t, r.url+"/v1/completions", string(b), "X-Request-Id", id); resp.StatusCode != http.StatusOK {
				t.Fatalf("%s: status %d: %s", id, resp.StatusCode, body)
			}
			ids = append(ids, id)
			time.Sleep(20 * time.Millisecond)
		}
	}

	// Status lines come every second; wait for one per worker covering
	// the requests.
	var lines []testlog.Line
	testwait.For(t, 10*time.Second, "a worker cache status line per worker after the requests", func() bool {
		lines = testlog.Parse(r.proc.Output())
		seen := map[string]bool{}
		for _, l := range testlog.WithMsg(lines, "worker cache status") {
			if n, _ := l.Number("gpu_prefix_requested_tokens"); n > 0 {
				seen[l.String("worker")] = true
			}
		}
		// Requests go where kvaware puts them: at least one worker had
		// some; every worker logs its status.
		status := map[string]bool{}
		for _, l := range testlog.WithMsg(lines, "worker cache status") {
			status[l.String("worker")] = true
		}
		return len(seen) > 0 && len(status) == len(ws)
	})

	for _, msg := range []string{"worker registered", "kv events: subscribed", "worker models"} {
		got := map[string]testlog.Line{}
		for _, l := range testlog.WithMsg(lines, msg) {
			got[l.String("worker")] = l
		}
		for _, u := range urls {
			l, ok := got[u]
			if !ok {
				t.Errorf("no %q line for %s", msg, u)
				continue
			}
			if l.Level() != "INFO" {
				t.Errorf("%q at %s", msg, l.Level())
			}
		}
	}

	routed := map[string]testlog.Line{}
	for _, l := range testlog.WithMsg(lines, "routed") {
		routed[l.String("request_id")] = l
	}
	for i, id := range ids {
		l, ok := routed[id]
		if !ok {
			t.Errorf("no routed line for %s", id)
			continue
		}
		prompt, _ := l.Number("prompt_chunks")
		matched, _ := l.Number("matched_chunks")
		_, hasPrefill := l.Number("prefill_tokens")
		if l.Level() != "INFO" || l.String("strategy") != "kvaware" || !slices.Contains(urls, l.String("worker")) ||
			l.String("model") != simModel || prompt == 0 || !hasPrefill {
			t.Errorf("%s: routed line %v", id, l)
		}
		first := i%2 == 0
		switch {
		case first && (l.String("fallback") != "no_prefix_cached" || matched != 0):
			t.Errorf("%s, the first of its prompt: fallback %q, %v matched, want no_prefix_cached and 0", id, l.String("fallback"), matched)
		case !first && (l.String("fallback") != "" || matched == 0):
			t.Errorf("%s, a repeat: fallback %q, %v matched, want none and some", id, l.String("fallback"), matched)
		}
	}
	if got := scrape(t, r.url+"/metrics", `warmpath_router_routing_fallbacks_total{reason="no_prefix_cached",strategy="kvaware"}`); got != 2 {
		t.Errorf("routing_fallbacks_total no_prefix_cached = %v, want 2", got)
	}

	for _, l := range testlog.WithMsg(lines, "worker cache status") {
		for _, k := range []string{"gpu_kv_cache_usage", "running", "waiting", "window_seconds", "gpu_prefix_requested_tokens",
			"lmcache_requested_tokens", "lmcache_hit_tokens", "lmcache_local_cache_usage_bytes"} {
			if _, ok := l.Number(k); !ok {
				t.Errorf("worker cache status without %s: %v", k, l)
			}
		}
		if l.Level() != "INFO" || !slices.Contains(urls, l.String("worker")) {
			t.Errorf("worker cache status %v", l)
		}
	}
	if t.Failed() {
		return
	}
	// One of each, as the router wrote it, for docs/router.md.
	out := strings.Split(r.proc.Output(), "\n")
	for _, sub := range []string{`"msg":"worker registered"`, `"msg":"worker models"`, `"msg":"kv events: subscribed"`,
		`"request_id":"` + ids[0] + `"`, `"request_id":"` + ids[1] + `"`, `"msg":"worker cache status"`} {
		if i := slices.IndexFunc(out, func(s string) bool { return strings.Contains(s, sub) }); i >= 0 {
			t.Log(out[i])
		}
	}
}
