package routerbench

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestRunQuick runs the whole benchmark in quick mode against the fake
// workers directly, through a real nginx and through the stdlib proxy
// (built from tools/cmd/bench-stdproxy), writes the report and checks
// its keys. It asserts nothing about speed. A missing nginx fails the test:
// `make test` installs it.
func TestRunQuick(t *testing.T) {
	if _, err := FindNginx(""); err != nil {
		t.Fatalf("%v (the benchmark compares the router with nginx; this test needs it)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := QuickConfig()
	c.Targets = []string{Direct, Nginx, Stdlib}
	rep, err := Run(ctx, c)
	if errors.Is(err, ErrNoNginx) {
		t.Fatal(err)
	}
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	path := filepath.Join(t.TempDir(), "bench", "results", "router_overhead.json")
	if err := rep.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("report is not JSON: %v", err)
	}

	for _, pre := range []string{"", "stream_"} {
		for _, k := range []string{"direct_p50_us", "direct_p99_us", "nginx_p50_us", "nginx_p99_us",
			"stdlib_p50_us", "stdlib_p99_us", "direct_max_rps", "nginx_max_rps", "stdlib_max_rps"} {
			if v, ok := m[pre+k].(float64); !ok || v <= 0 {
				t.Errorf("%s = %v, want a positive number", pre+k, m[pre+k])
			}
		}
		for _, k := range []string{"router_p50_us", "router_p99_us", "router_max_rps", "added_p99_ratio", "max_rps_ratio",
			"router_vs_stdlib_added_p99_ratio", "router_vs_stdlib_max_rps_ratio"} {
			if v, ok := m[pre+k]; !ok || v != nil {
				t.Errorf("%s = %v (present %v), want null without the router", pre+k, v, ok)
			}
		}
		for _, k := range []string{"nginx_added_p99_us", "stdlib_added_p99_us"} {
			if _, ok := m[pre+k].(float64); !ok {
				t.Errorf("%s = %v, want a number", pre+k, m[pre+k])
			}
		}
	}
	for _, k := range []string{"stream_direct_ttfb_p99_us", "stream_nginx_ttfb_p99_us", "stream_stdlib_ttfb_p99_us"} {
		if v, ok := m[k].(float64); !ok || v <= 0 {
			t.Errorf("%s = %v, want a positive number", k, m[k])
		}
	}
	if m["router_strategy"] != "prefixaware" {
		t.Errorf("router_strategy = %v, want prefixaware", m["router_strategy"])
	}
	if m["errors"] != 0.0 {
		t.Errorf("errors = %v, want 0 (first errors are in the runs)", m["errors"])
	}
	env, _ := m["environment"].(map[string]any)
	for _, k := range []string{"timestamp", "go_version", "nginx_version", "stdlib_binary"} {
		if s, _ := env[k].(string); s == "" {
			t.Errorf("environment.%s = %v, want a string", k, env[k])
		}
	}
	if n, _ := env["cores"].(float64); n < 1 {
		t.Errorf("environment.cores = %v, want >= 1", env["cores"])
	}
	params, _ := m["parameters"].(map[string]any)
	if params["prompt_bytes"] != 8192.0 {
		t.Errorf("parameters.prompt_bytes = %v, want 8192", params["prompt_bytes"])
	}
	// 2 modes × 2 latency levels × 3 targets; 2 modes × 2 rps levels × 3 targets.
	if lr, _ := m["latency_runs"].([]any); len(lr) != 12 {
		t.Errorf("%d latency runs, want 12", len(lr))
	}
	if tr, _ := m["throughput_runs"].([]any); len(tr) != 12 {
		t.Errorf("%d throughput runs, want 12", len(tr))
	}
}
