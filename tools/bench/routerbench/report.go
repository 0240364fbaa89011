package routerbench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// Goals the router issue sets, reported (never asserted) next to the ratios.
const (
	GoalAddedP99Ratio = 2.0 // router added p99 at most this times nginx's
	GoalMaxRPSRatio   = 0.5 // router max RPS at least this times nginx's
)

// Report is the outcome of a run. It marshals to the flat object of
// docs/benchmarks.md: the headline keys (direct_p50_us, ..., max_rps_ratio)
// at the top level, null for a target not measured, then "environment",
// "parameters" and every step under "latency_runs" and "throughput_runs".
type Report struct {
	Environment Environment
	Parameters  Parameters
	Latency     []Step
	Throughput  []Step
}

// Environment records where and when the run happened.
type Environment struct {
	Timestamp    string `json:"timestamp"`
	Cores        int    `json:"cores"`
	GOMAXPROCS   int    `json:"gomaxprocs"`
	GoVersion    string `json:"go_version"`
	OS           string `json:"os"`
	Arch         string `json:"arch"`
	CPU          string `json:"cpu,omitempty"`
	Kernel       string `json:"kernel,omitempty"`
	LoadAvg      string `json:"loadavg_at_start,omitempty"`
	NginxVersion string `json:"nginx_version,omitempty"`
	RouterBinary string `json:"router_binary,omitempty"`
	StdlibBinary string `json:"stdlib_binary,omitempty"`
}

func (e *Environment) addProxy(p *Proxy) {
	switch p.Name {
	case Nginx:
		e.NginxVersion = p.Version
	case Router:
		e.RouterBinary = p.Version
	case Stdlib:
		e.StdlibBinary = p.Version
	}
}

// Parameters are the run's settings, durations in seconds.
type Parameters struct {
	Targets             []string `json:"targets"`
	Upstreams           int      `json:"upstreams"`
	Model               string   `json:"model"`
	PromptBytes         int      `json:"prompt_bytes"`
	Prefixes            int      `json:"prefixes"`
	PromptsPerPrefix    int      `json:"prompts_per_prefix"`
	MaxTokens           int      `json:"max_tokens"`
	StreamChunks        int      `json:"stream_chunks"`
	HeadlineConcurrency int      `json:"headline_concurrency"`
	LatencyConcurrency  []int    `json:"latency_concurrency"`
	LatencyRequests     int      `json:"latency_requests"`
	LatencyRounds       int      `json:"latency_rounds"`
	WarmupRequests      int      `json:"warmup_requests"`
	RPSConcurrency      []int    `json:"rps_concurrency"`
	RPSDurationS        float64  `json:"rps_duration_s"`
	RPSWarmupS          float64  `json:"rps_warmup_s"`
	RequestTimeoutS     float64  `json:"request_timeout_s"`
	NginxWorkers        string   `json:"nginx_workers"`
	RouterStrategy      string   `json:"router_strategy"`
	RouterArgs          []string `json:"router_args"`
}

func newReport(c Config) *Report {
	return &Report{
		Environment: Environment{
			Timestamp:  time.Now().UTC().Format(time.RFC3339),
			Cores:      runtime.NumCPU(),
			GOMAXPROCS: runtime.GOMAXPROCS(0),
			GoVersion:  runtime.Version(),
			OS:         runtime.GOOS,
			Arch:       runtime.GOARCH,
			CPU:        cpuModel(),
			Kernel:     firstLine("/proc/sys/kernel/osrelease"),
			LoadAvg:    firstLine("/proc/loadavg"),
		},
		Parameters: Parameters{
			Targets: c.Targets, Upstreams: c.Upstreams, Model: c.Workload.Model,
			PromptBytes: c.Workload.PromptBytes, Prefixes: c.Workload.Prefixes,
			PromptsPerPrefix: c.Workload.PerPrefix, MaxTokens: c.Workload.MaxTokens,
			StreamChunks: c.StreamChunks, HeadlineConcurrency: c.LatencyConcurrency[0],
			LatencyConcurrency: c.LatencyConcurrency, LatencyRequests: c.LatencyRequests,
			LatencyRounds: c.LatencyRounds, WarmupRequests: c.Warmup,
			RPSConcurrency: c.RPSConcurrency, RPSDurationS: c.RPSDuration.Seconds(),
			RPSWarmupS: c.RPSWarmup.Seconds(), RequestTimeoutS: c.RequestTimeout.Seconds(),
			NginxWorkers: c.Nginx.Workers, RouterStrategy: c.Router.Strategy,
			RouterArgs: append([]string{}, c.Router.Args...),
		},
	}
}

// Metrics returns the flat headline figures, keyed as in the JSON file;
// a figure that could not be measured is nil. For each mode prefix m (""
// for non-streamed, "stream_" for streamed) and target t:
//
//	m+t+"_p50_us", m+t+"_p99_us"   latency at the headline concurrency
//	                               (streams: to the last byte)
//	"stream_"+t+"_ttfb_p50_us", "stream_"+t+"_ttfb_p99_us"
//	m+t+"_max_rps"                 best closed-loop RPS with no errors
//	m+t+"_max_rps_concurrency"     the level it was reached at
//	m+p+"_added_p50_us", m+p+"_added_p99_us"   proxy p (router, nginx,
//	                               stdlib) minus direct
//	m+"added_p99_ratio"            router added p99 / nginx added p99
//	m+"max_rps_ratio"              router max RPS / nginx max RPS
//	m+"goal_met"                   both ratios within the goals
//	m+"router_vs_stdlib_added_p99_ratio"  router added p99 / stdlib added p99
//	m+"router_vs_stdlib_max_rps_ratio"    router max RPS / stdlib max RPS
//
// plus "router_strategy" and "errors" (failed requests over the run).
func (r *Report) Metrics() map[string]any {
	m := map[string]any{"router_strategy": r.Parameters.RouterStrategy}
	errs := 0
	for _, s := range append(append([]Step{}, r.Latency...), r.Throughput...) {
		errs += s.Errors
	}
	m["errors"] = errs
	for _, stream := range []bool{false, true} {
		r.modeMetrics(m, stream)
	}
	return m
}

func (r *Report) modeMetrics(m map[string]any, stream bool) {
	pre := ""
	if stream {
		pre = "stream_"
	}
	p50 := map[string]*float64{}
	p99 := map[string]*float64{}
	rps := map[string]*float64{}
	for _, t := range []string{Direct, Nginx, Stdlib, Router} {
		m[pre+t+"_p50_us"], m[pre+t+"_p99_us"] = nil, nil
		if s := r.latencyStep(t, stream); s != nil && s.Latency.Count > 0 {
			p50[t], p99[t] = &s.Latency.P50US, &s.Latency.P99US
			m[pre+t+"_p50_us"], m[pre+t+"_p99_us"] = s.Latency.P50US, s.Latency.P99US
			if stream {
				m[pre+t+"_ttfb_p50_us"], m[pre+t+"_ttfb_p99_us"] = s.TTFB.P50US, s.TTFB.P99US
			}
		} else if stream {
			m[pre+t+"_ttfb_p50_us"], m[pre+t+"_ttfb_p99_us"] = nil, nil
		}
		m[pre+t+"_max_rps"], m[pre+t+"_max_rps_concurrency"] = nil, nil
		if s := r.bestThroughput(t, stream); s != nil {
			rps[t] = &s.RPS
			m[pre+t+"_max_rps"], m[pre+t+"_max_rps_concurrency"] = s.RPS, s.Concurrency
		}
	}
	for _, t := range []string{Router, Nginx, Stdlib} {
		m[pre+t+"_added_p50_us"] = nilIfNone(diff(p50[t], p50[Direct]))
		m[pre+t+"_added_p99_us"] = nilIfNone(diff(p99[t], p99[Direct]))
	}
	addedRatio := ratio(diff(p99[Router], p99[Direct]), diff(p99[Nginx], p99[Direct]))
	rpsRatio := ratio(rps[Router], rps[Nginx])
	m[pre+"added_p99_ratio"] = nilIfNone(addedRatio)
	m[pre+"max_rps_ratio"] = nilIfNone(rpsRatio)
	m[pre+"goal_met"] = nil
	if addedRatio != nil && rpsRatio != nil {
		m[pre+"goal_met"] = *addedRatio <= GoalAddedP99Ratio && *rpsRatio >= GoalMaxRPSRatio
	}
	m[pre+"router_vs_stdlib_added_p99_ratio"] = nilIfNone(ratio(diff(p99[Router], p99[Direct]), diff(p99[Stdlib], p99[Direct])))
	m[pre+"router_vs_stdlib_max_rps_ratio"] = nilIfNone(ratio(rps[Router], rps[Stdlib]))
}

// latencyStep is the target's step at the headline concurrency.
func (r *Report) latencyStep(target string, stream bool) *Step {
	for i := range r.Latency {
		s := &r.Latency[i]
		if s.Target == target && s.Stream == stream && s.Concurrency == r.Parameters.HeadlineConcurrency {
			return s
		}
	}
	return nil
}

// bestThroughput is the target's highest-RPS step without errors.
func (r *Report) bestThroughput(target string, stream bool) *Step {
	var best *Step
	for i := range r.Throughput {
		s := &r.Throughput[i]
		if s.Target == target && s.Stream == stream && s.Errors == 0 && s.Requests > 0 &&
			(best == nil || s.RPS > best.RPS) {
			best = s
		}
	}
	return best
}

// diff is a−b, nil if either is missing.
func diff(a, b *float64) *float64 {
	if a == nil || b == nil {
		return nil
	}
	d := round1(*a - *b)
	return &d
}

// ratio is a/b to three places, nil if either is missing or b is not
// positive (an added latency at or below zero is noise, not a baseline).
func ratio(a, b *float64) *float64 {
	if a == nil || b == nil || *b <= 0 {
		return nil
	}
	q := round3(*a / *b)
	return &q
}

func nilIfNone(v *float64) any {
	if v == nil {
		return nil
	}
	return *v
}

// MarshalJSON writes the flat headline keys of Metrics and the nested
// details; encoding/json sorts the keys.
func (r *Report) MarshalJSON() ([]byte, error) {
	m := r.Metrics()
	m["environment"] = r.Environment
	m["parameters"] = r.Parameters
	m["latency_runs"] = r.Latency
	m["throughput_runs"] = r.Throughput
	return json.Marshal(m)
}

// WriteFile writes r as indented JSON to path, creating its directory,
// through a temporary file renamed into place.
func (r *Report) WriteFile(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("routerbench: encode report: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("routerbench: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("routerbench: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("routerbench: %w", err)
	}
	return nil
}

func firstLine(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	return strings.TrimSpace(string(line))
}

// cpuModel is /proc/cpuinfo's first "model name", or "" off Linux.
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	for line := range strings.Lines(string(b)) {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
