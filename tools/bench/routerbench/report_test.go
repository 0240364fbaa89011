package routerbench

import (
	"encoding/json"
	"testing"
)

func step(target string, stream bool, conc int, p50, p99, rps float64, errs int) Step {
	s := Step{Target: target, Stream: stream, Concurrency: conc, Requests: 100, Errors: errs, RPS: rps,
		Latency: Summary{Count: 100, P50US: p50, P99US: p99}}
	if stream {
		s.TTFB = &Summary{Count: 100, P50US: p50 / 2, P99US: p99 / 2}
	}
	return s
}

func TestMetrics(t *testing.T) {
	r := &Report{Parameters: Parameters{HeadlineConcurrency: 1, RouterStrategy: "prefixaware"}}
	for _, stream := range []bool{false, true} {
		r.Latency = append(r.Latency,
			step(Direct, stream, 1, 50, 100, 0, 0),
			step(Nginx, stream, 1, 150, 300, 0, 0),
			step(Stdlib, stream, 1, 100, 250, 0, 0),
			step(Router, stream, 1, 200, 400, 0, 0),
			step(Router, stream, 8, 900, 9000, 0, 0), // not the headline level
		)
		r.Throughput = append(r.Throughput,
			step(Nginx, stream, 4, 0, 0, 10000, 0),
			step(Nginx, stream, 16, 0, 0, 12000, 3), // errors: not sustained
			step(Stdlib, stream, 4, 0, 0, 8000, 0),
			step(Router, stream, 4, 0, 0, 4000, 0),
			step(Router, stream, 16, 0, 0, 6000, 0),
		)
	}
	m := r.Metrics()
	want := map[string]any{
		"direct_p50_us": 50.0, "nginx_p99_us": 300.0, "router_p99_us": 400.0,
		"nginx_added_p99_us": 200.0, "router_added_p99_us": 300.0, "router_added_p50_us": 150.0,
		"added_p99_ratio": 1.5, "nginx_max_rps": 10000.0, "nginx_max_rps_concurrency": 4,
		"router_max_rps": 6000.0, "max_rps_ratio": 0.6, "goal_met": true,
		"stream_router_ttfb_p99_us": 200.0, "stream_added_p99_ratio": 1.5, "stream_goal_met": true,
		"direct_max_rps": nil, "router_strategy": "prefixaware", "errors": 6,
		"stdlib_p99_us": 250.0, "stdlib_added_p99_us": 150.0, "stdlib_max_rps": 8000.0,
		"router_vs_stdlib_added_p99_ratio": 2.0, "router_vs_stdlib_max_rps_ratio": 0.75,
		"stream_stdlib_ttfb_p99_us": 125.0, "stream_router_vs_stdlib_max_rps_ratio": 0.75,
	}
	for k, v := range want {
		if got, ok := m[k]; !ok || got != v {
			t.Errorf("%s = %v (present %v), want %v", k, got, ok, v)
		}
	}
}

func TestMetricsWithoutRouter(t *testing.T) {
	r := &Report{Parameters: Parameters{HeadlineConcurrency: 1}}
	r.Latency = []Step{step(Direct, false, 1, 50, 100, 0, 0), step(Nginx, false, 1, 150, 300, 0, 0)}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"router_p50_us", "router_p99_us", "router_max_rps", "router_added_p99_us",
		"added_p99_ratio", "max_rps_ratio", "goal_met", "stream_router_ttfb_p99_us",
		"stdlib_p99_us", "stdlib_added_p99_us", "router_vs_stdlib_added_p99_ratio", "router_vs_stdlib_max_rps_ratio"} {
		if v, ok := m[k]; !ok || v != nil {
			t.Errorf("%s = %v (present %v), want null", k, v, ok)
		}
	}
	if m["nginx_added_p99_us"] != 200.0 {
		t.Errorf("nginx_added_p99_us = %v, want 200", m["nginx_added_p99_us"])
	}
}
