// Package demo is `make demo`: the whole stack on one machine, showing
// what cache-aware routing and tiered caching buy. For every routing
// strategy, with LMCache L1 only and with the cache server as L2 behind
// it, it starts a fresh stack (package stack), runs each workload through
// the router in live mode, reads the workers' metrics, and reports the
// comparison against round robin with L1 only.
package demo

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/warmpath/warmpath/tools/bench/live"
	"github.com/warmpath/warmpath/tools/bench/report"
	"github.com/warmpath/warmpath/tools/bench/stack"
)

// Workload is a named request sequence.
type Workload struct {
	Name     string
	Requests []live.Request
	// Oracle is the workload's infinite-cache hit rate (0: unknown).
	Oracle float64
}

// Tiering is one cache configuration.
type Tiering struct {
	Name string
	L2   bool
}

// Config is one demo run.
type Config struct {
	BinDir, OutDir string
	Model          string
	Workers        int
	TimeScale      float64
	Strategies     []string
	Tierings       []Tiering
	Workloads      []Workload
	// SimArgs and SimEnv size every worker (preset, GPU blocks, L1).
	SimArgs []string
	SimEnv  []string
	// CacheBytes is the cache server's memory capacity.
	CacheBytes int64
	// OffloadCapacityTokens is what each worker's L1 holds, for the
	// router's prefixAware.offloadCapacityTokens (0: not set).
	OffloadCapacityTokens int
	// LoadGuardWindow, when > 0, replaces the router's loadGuard.window.
	LoadGuardWindow float64
	// Baseline names the row changes are measured against.
	Baseline string
	Log      io.Writer
}

// Result is the demo's output.
type Result struct {
	Summaries []report.Summary `json:"summaries"`
	Config    map[string]any   `json:"config"`
	Plots     []string         `json:"plots"`
}

// Run runs every configuration and writes the report under cfg.OutDir.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	logDir := filepath.Join(cfg.OutDir, "logs")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, fmt.Errorf("demo: %w", err)
	}
	total := 0
	for _, w := range cfg.Workloads {
		total += len(w.Requests) * len(cfg.Strategies) * len(cfg.Tierings)
	}
	bar := newBar(cfg.Log, total)
	var (
		runs []report.Run
		sums []report.Summary
	)
	for _, tier := range cfg.Tierings {
		for _, strategy := range cfg.Strategies {
			for _, w := range cfg.Workloads {
				name := strategy + " / " + tier.Name
				fmt.Fprintf(cfg.Log, "demo: %-22s %s (%d requests)\n", name, w.Name, len(w.Requests))
				r, err := runOne(ctx, cfg, logDir, strategy, tier, w, bar)
				if err != nil {
					return nil, fmt.Errorf("demo: %s on %s: %w", name, w.Name, err)
				}
				r.Name = name
				r.OracleHitRate = w.Oracle
				runs = append(runs, r)
				sums = append(sums, report.Summarize(r))
			}
		}
	}
	_ = bar.Finish()
	report.Compare(sums, cfg.Baseline)
	res := &Result{Summaries: report.Sorted(sums), Config: map[string]any{
		"workers": cfg.Workers, "time_scale": cfg.TimeScale, "model": cfg.Model, "sim_args": cfg.SimArgs, "sim_env": cfg.SimEnv,
		"cache_bytes": cfg.CacheBytes, "baseline": cfg.Baseline, "router_config": routerConfig("<strategy>", cfg.OffloadCapacityTokens, cfg.LoadGuardWindow),
	}}
	for _, w := range cfg.Workloads {
		var wr []report.Run
		var ws []report.Summary
		for i, r := range runs {
			if r.Workload == w.Name {
				wr = append(wr, r)
				ws = append(ws, sums[i])
			}
		}
		paths, err := report.Plots(cfg.OutDir, w.Name, wr, ws)
		if err != nil {
			return nil, err
		}
		res.Plots = append(res.Plots, paths...)
	}
	return res, nil
}

// runOne starts a fresh stack, runs one workload through its router and
// stops it.
func runOne(ctx context.Context, cfg Config, logDir, strategy string, tier Tiering, w Workload, bar *progressbar.ProgressBar) (report.Run, error) {
	dir := filepath.Join(logDir, fmt.Sprintf("%s-%s-%s", strategy, tier.Name, w.Name))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return report.Run{}, err
	}
	st, err := stack.Start(ctx, stack.Config{
		BinDir: cfg.BinDir, LogDir: dir, Model: cfg.Model, Workers: cfg.Workers, Strategy: strategy, L2: tier.L2,
		SimArgs: cfg.SimArgs, SimEnv: cfg.SimEnv, TimeScale: cfg.TimeScale, CacheBytes: cfg.CacheBytes,
		RouterConfig:     routerConfig(strategy, cfg.OffloadCapacityTokens, cfg.LoadGuardWindow),
		L1CapacityTokens: cfg.OffloadCapacityTokens,
	})
	if err != nil {
		return report.Run{}, err
	}
	defer func() { _ = st.Stop() }()
	r, err := Live(ctx, LiveConfig{BaseURL: st.RouterURL, Model: cfg.Model, Workers: st.WorkerURLs, TimeScale: cfg.TimeScale, Bar: bar}, w)
	if err != nil {
		return r, err
	}
	// Each request's figures beside the stack's logs: a tail in the table
	// is read from here (which requests, cold or cached).
	return r, report.WriteJSON(filepath.Join(dir, "requests.json"), r.Samples)
}

// routerConfig is the routing file the demo's router runs: the strategy,
// the L1 size prefixaware should count (docs/router.md) and, when set, the
// load guard's window (with its default ratio).
func routerConfig(strategy string, offload int, window float64) string {
	c := fmt.Sprintf("strategy: %s\nprefixAware:\n  offloadCapacityTokens: %d\n", strategy, offload)
	if window > 0 {
		c += fmt.Sprintf("loadGuard:\n  window: %g\n  ratio: 0.2\n", window)
	}
	return c
}

// LiveConfig says where Live sends a workload.
type LiveConfig struct {
	// BaseURL is the router's (or a worker's) base URL.
	BaseURL, Model string
	// Workers are scraped before and after, for hit rate and spread.
	Workers []string
	// TimeScale converts wall time back to modelled GPU time.
	TimeScale float64
	// Bar, when set, advances per request; else Log gets a progress bar.
	Bar *progressbar.ProgressBar
	Log io.Writer
}

// Live runs one workload against a running router or worker and returns
// what it measured.
func Live(ctx context.Context, cfg LiveConfig, w Workload) (report.Run, error) {
	if cfg.TimeScale <= 0 {
		cfg.TimeScale = 1
	}
	bar := cfg.Bar
	if bar == nil {
		bar = newBar(cfg.Log, len(w.Requests))
		defer func() { _ = bar.Finish() }()
	}
	before, err := live.Scrape(ctx, cfg.Workers)
	if err != nil {
		return report.Run{}, err
	}
	start := time.Now()
	results, err := live.Run(ctx, live.Config{
		BaseURL: strings.TrimSuffix(cfg.BaseURL, "/") + "/v1/", Model: cfg.Model,
		Progress: func(int, int) { _ = bar.Add(1) },
	}, w.Requests)
	if err != nil {
		return report.Run{}, err
	}
	makespan := time.Since(start)
	after, err := live.Scrape(ctx, cfg.Workers)
	if err != nil {
		return report.Run{}, err
	}
	return toRun(w.Name, results, live.Delta(before, after), makespan, cfg.TimeScale), nil
}

// newBar is a progress bar on a terminal and nothing elsewhere (CI logs).
func newBar(w io.Writer, total int) *progressbar.ProgressBar {
	if f, ok := w.(*os.File); !ok || !isTerminal(f) {
		w = io.Discard
	}
	return progressbar.NewOptions(total, progressbar.OptionSetWriter(w), progressbar.OptionSetDescription("requests"),
		progressbar.OptionShowCount(), progressbar.OptionSetWidth(30), progressbar.OptionThrottle(200*time.Millisecond),
		progressbar.OptionClearOnFinish())
}

func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// toRun converts wall-clock measurements into modelled GPU time (× the
// time scale) and the workers' metric deltas into hit rate and spread.
func toRun(workload string, results []live.Result, delta map[string]live.Counters, makespan time.Duration, scale float64) report.Run {
	// The hit rate comes from each response's usage (cached tokens at
	// first admission), as in the des mode; the workers' metrics view is
	// kept beside it.
	r := report.Run{Workload: workload, Makespan: time.Duration(float64(makespan) * scale), PerWorker: map[string]float64{},
		HitRate: math.NaN(), MetricsHitRate: math.NaN()}
	var queries, hits float64
	for w, c := range delta {
		r.PerWorker[w] = c[live.RequestsServed]
		queries += c[live.PrefixQueries]
		hits += c[live.PrefixHits] + c[live.ExternalHits]
	}
	if queries > 0 {
		r.MetricsHitRate = hits / queries
	}
	for _, x := range results {
		r.Samples = append(r.Samples, report.Sample{
			TTFT: time.Duration(float64(x.TTFT) * scale), E2E: time.Duration(float64(x.E2E) * scale),
			MeanITL: time.Duration(float64(x.MeanITL) * scale), PromptTokens: x.PromptTok, CachedTokens: x.CachedTok,
			OutputTokens: x.OutputTok, Failed: x.Err != "",
		})
	}
	return r
}
