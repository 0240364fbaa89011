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
// workers directly and through a real nginx, writes the report and checks
// its keys. It asserts nothing about speed. A missing nginx fails the test:
// `make test` installs it.
func TestRunQuick(t *testing.T) {
	if _, err := FindNginx(""); err != nil {
		t.Fatalf("%v (the benchmark compares the router with nginx; this test needs it)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := QuickConfig()
	c.Targets = []string{Direct, Nginx}
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
			"direct_max_rps", "nginx_max_rps"} {
			if v, ok := m[pre+k].(float64); !ok || v <= 0 {
				t.Errorf("%s = %v, want a positive number", pre+k, m[pre+k])
			}
		}
		for _, k := range []string{"router_p50_us", "router_p99_us", "router_max_rps", "added_p99_ratio", "max_rps_ratio"} {
			if v, ok := m[pre+k]; !ok || v != nil {
				t.Errorf("%s = %v (present %v), want null without the router", pre+k, v, ok)
			}
		}
		if _, ok := m[pre+"nginx_added_p99_us"].(float64); !ok {
			t.Errorf("%snginx_added_p99_us = %v, want a number", pre, m[pre+"nginx_added_p99_us"])
		}
	}
	for _, k := range []string{"stream_direct_ttfb_p99_us", "stream_nginx_ttfb_p99_us"} {
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
	for _, k := range []string{"timestamp", "go_version", "nginx_version"} {
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
	// 2 modes × 2 latency levels × 2 targets; 2 modes × 2 rps levels × 2 targets.
	if lr, _ := m["latency_runs"].([]any); len(lr) != 8 {
		t.Errorf("%d latency runs, want 8", len(lr))
	}
	if tr, _ := m["throughput_runs"].([]any); len(tr) != 8 {
		t.Errorf("%d throughput runs, want 8", len(tr))
	}
}
