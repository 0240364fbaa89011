// Package routerscale measures how the router's own cost grows with its
// fleet: the live router binary in front of 8, 32, 128 fake workers (the
// router benchmark's, in this process), driven with a fixed number of
// requests, its CPU time read from /proc before and after, its memory
// from /proc and its own Go metrics. Round robin, which routes by a
// counter, runs beside the cache-aware strategies at every size as the
// floor they are compared with.
package routerscale

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/warmpath/warmpath/tools/bench/procstat"
	"github.com/warmpath/warmpath/tools/bench/routerbench"
)

// Config is one experiment.
type Config struct {
	// Fleets are the fleet sizes, Strategies the router's --strategy values.
	Fleets     []int
	Strategies []string
	// RouterBin is the router binary; Dir holds its logs.
	RouterBin, Dir string
	// StrategyArgs are extra router flags per strategy (kvaware's tokenizer
	// and event source).
	StrategyArgs map[string][]string
	// Requests are measured, Warmup sent first and not measured, from
	// Concurrency goroutines.
	Requests, Warmup, Concurrency int
	// Idle is how long the router is watched with no traffic: its probes
	// and scrapes of the fleet cost CPU whatever the load.
	Idle time.Duration
	// Workload is the requests' prompts (bench-router's).
	Workload routerbench.WorkloadSpec
	Log      io.Writer
}

// Row is one fleet size and strategy.
type Row struct {
	Workers  int     `json:"workers"`
	Strategy string  `json:"strategy"`
	Requests int     `json:"requests"`
	Errors   int     `json:"errors"`
	RPS      float64 `json:"rps"`
	// CPUPerRequestUs is the router's CPU time over the measured requests,
	// per request; NetCPUPerRequestUs less what it spends idle over as
	// long (probes and scrapes of the fleet).
	CPUPerRequestUs    float64 `json:"cpu_us_per_request"`
	NetCPUPerRequestUs float64 `json:"net_cpu_us_per_request"`
	// IdleCPUPercent is the router's CPU use with no traffic, in percent
	// of one core.
	IdleCPUPercent float64 `json:"idle_cpu_percent_of_core"`
	RSSBytes       int64   `json:"rss_bytes"`
	PeakRSSBytes   int64   `json:"peak_rss_bytes"`
	HeapAllocBytes int64   `json:"go_heap_alloc_bytes"`
	HeapInuseBytes int64   `json:"go_heap_inuse_bytes"`
	P50Us          float64 `json:"latency_p50_us"`
	P99Us          float64 `json:"latency_p99_us"`
	// Against round robin at the same size, and against this strategy at
	// the smallest fleet (nil where either side is missing).
	CPUxRoundRobin *float64 `json:"cpu_per_request_x_roundrobin,omitempty"`
	CPUxSmallest   *float64 `json:"cpu_per_request_x_smallest_fleet,omitempty"`
	HeapxSmallest  *float64 `json:"go_heap_x_smallest_fleet,omitempty"`
}

// Run measures every fleet size and strategy, one router at a time.
func Run(ctx context.Context, c Config) ([]Row, error) {
	if len(c.Fleets) == 0 || len(c.Strategies) == 0 || c.Requests < 1 || c.Concurrency < 1 || c.RouterBin == "" {
		return nil, errors.New("routerscale: need fleets, strategies, a router binary, requests and concurrency")
	}
	w, err := routerbench.NewWorkload(c.Workload)
	if err != nil {
		return nil, err
	}
	var rows []Row
	for _, n := range c.Fleets {
		fleet, err := routerbench.StartFleet(ctx, n, c.Workload.Model, 8)
		if err != nil {
			return nil, err
		}
		for _, s := range c.Strategies {
			r, err := measure(ctx, c, fleet, n, s, w.Plain)
			if err != nil {
				fleet.Close()
				return nil, fmt.Errorf("routerscale: %d workers, %s: %w", n, s, err)
			}
			if c.Log != nil {
				fmt.Fprintf(c.Log, "routerscale: %3d workers %-12s %8.1f µs CPU/request (%.1f net), idle %.1f%% of a core, RSS %.1f MiB, heap %.1f MiB, %.0f req/s\n",
					n, s, r.CPUPerRequestUs, r.NetCPUPerRequestUs, r.IdleCPUPercent, mib(r.RSSBytes), mib(r.HeapAllocBytes), r.RPS)
			}
			rows = append(rows, r)
		}
		fleet.Close()
	}
	Compare(rows)
	return rows, nil
}

func measure(ctx context.Context, c Config, fleet *routerbench.Fleet, n int, strategy string, bodies [][]byte) (Row, error) {
	dir, err := os.MkdirTemp(c.Dir, fmt.Sprintf("router-%d-%s-", n, strategy))
	if err != nil {
		return Row{}, fmt.Errorf("routerscale: %w", err)
	}
	p, err := routerbench.StartRouter(ctx, routerbench.RouterConfig{Bin: c.RouterBin, Strategy: strategy, Args: c.StrategyArgs[strategy],
		Workers: fleet.URLs(), Dir: dir, ReadyTimeout: 3 * time.Minute})
	if err != nil {
		return Row{}, err
	}
	defer func() { _ = p.Stop(5 * time.Second) }()
	t := routerbench.NewTarget("router", c.Concurrency, 10*time.Second, p.URL)
	defer t.Close()
	if c.Warmup > 0 {
		if st := routerbench.Drive(ctx, t, bodies, c.Concurrency, c.Warmup); st.Errors > 0 {
			return Row{}, fmt.Errorf("warm-up: %d errors, first: %s", st.Errors, st.FirstError)
		}
	}
	// Idle: what the fleet's probes and scrapes cost with no traffic.
	idle0, err := procstat.Read(p.Pid())
	if err != nil {
		return Row{}, err
	}
	began := time.Now()
	select {
	case <-ctx.Done():
		return Row{}, ctx.Err()
	case <-time.After(c.Idle):
	}
	idle1, err := procstat.Read(p.Pid())
	if err != nil {
		return Row{}, err
	}
	idleRate := (idle1.CPU - idle0.CPU).Seconds() / time.Since(began).Seconds()

	before, err := procstat.Read(p.Pid())
	if err != nil {
		return Row{}, err
	}
	st := routerbench.Drive(ctx, t, bodies, c.Concurrency, c.Requests)
	after, err := procstat.Read(p.Pid())
	if err != nil {
		return Row{}, err
	}
	heap, err := heapMetrics(ctx, p.URL+"/metrics")
	if err != nil {
		return Row{}, err
	}
	cpu := (after.CPU - before.CPU).Seconds()
	r := Row{Workers: n, Strategy: strategy, Requests: st.Requests, Errors: st.Errors, RPS: st.RPS,
		IdleCPUPercent: round1(100 * idleRate), RSSBytes: after.RSS, PeakRSSBytes: after.PeakRSS,
		HeapAllocBytes: heap["go_memstats_heap_alloc_bytes"], HeapInuseBytes: heap["go_memstats_heap_inuse_bytes"],
		P50Us: st.Latency.P50US, P99Us: st.Latency.P99US}
	if st.Requests > 0 {
		r.CPUPerRequestUs = round1(cpu / float64(st.Requests) * 1e6)
		r.NetCPUPerRequestUs = round1(max(cpu-idleRate*st.Seconds, 0) / float64(st.Requests) * 1e6)
	}
	if st.Errors > 0 {
		return r, fmt.Errorf("%d of %d requests failed, first: %s", st.Errors, c.Requests, st.FirstError)
	}
	return r, nil
}

// heapMetrics reads the Go heap gauges of a Prometheus text page.
func heapMetrics(ctx context.Context, url string) (map[string]int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("routerscale: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("routerscale: metrics: %w", err)
	}
	defer resp.Body.Close()
	return parseGauges(resp.Body, "go_memstats_heap_alloc_bytes", "go_memstats_heap_inuse_bytes")
}

// parseGauges finds the unlabelled samples named in a Prometheus text page.
func parseGauges(r io.Reader, names ...string) (map[string]int64, error) {
	out := map[string]int64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok || !slices.Contains(names, name) {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			return nil, fmt.Errorf("routerscale: metric %s: %w", name, err)
		}
		out[name] = int64(v)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("routerscale: metrics: %w", err)
	}
	for _, n := range names {
		if _, ok := out[n]; !ok {
			return nil, fmt.Errorf("routerscale: metrics: no %s", n)
		}
	}
	return out, nil
}

// Compare fills each row's ratios: against round robin at its size, and
// against its own strategy at the smallest fleet measured.
func Compare(rows []Row) {
	rr := map[int]Row{}
	smallest := map[string]Row{}
	for _, r := range rows {
		if r.Strategy == "roundrobin" {
			rr[r.Workers] = r
		}
		if s, ok := smallest[r.Strategy]; !ok || r.Workers < s.Workers {
			smallest[r.Strategy] = r
		}
	}
	for i := range rows {
		r := &rows[i]
		if b, ok := rr[r.Workers]; ok {
			r.CPUxRoundRobin = ratio(r.CPUPerRequestUs, b.CPUPerRequestUs)
		}
		s := smallest[r.Strategy]
		r.CPUxSmallest = ratio(r.CPUPerRequestUs, s.CPUPerRequestUs)
		r.HeapxSmallest = ratio(float64(r.HeapAllocBytes), float64(s.HeapAllocBytes))
	}
}

func ratio(a, b float64) *float64 {
	if a <= 0 || b <= 0 {
		return nil
	}
	x := math.Round(a/b*1000) / 1000
	return &x
}

func round1(v float64) float64 { return math.Round(v*10) / 10 }

func mib(b int64) float64 { return float64(b) / (1 << 20) }
