package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/warmpath/warmpath/services/router/strategy"
	"github.com/warmpath/warmpath/tools/bench/capacity"
	"github.com/warmpath/warmpath/tools/bench/des"
	"github.com/warmpath/warmpath/tools/bench/report"
	"github.com/warmpath/warmpath/tools/bench/workload"
	"github.com/warmpath/warmpath/tools/vllmsim/lmcache"
)

// h100Price is Lambda's published on-demand price of one H100 SXM GPU
// (docs/benchmarks.md has the source and its date).
const (
	h100Price       = 3.78
	h100PriceSource = "Lambda on-demand 1x H100 SXM, $3.78/GPU-hour, https://lambda.ai/pricing (as listed 2026-05-07)"
)

// capacityBaselines are the rows every row is compared with: round robin
// without L1 (the managed offering's "no optimisation") and with it.
var capacityBaselines = capacity.Baselines{Strategy: strategy.NameRoundRobin, GPU: "GPU", WithL1: "GPU+L1"}

// capacityFlags are the capacity command's knobs.
type capacityFlags struct {
	workers, strategies, out, imgDir, trace, preset, l1Events, priceSource string
	seed                                                                   uint64
	traceMax, parallel, maxProbes, chatUsers, chatRounds, chatWorkers      int
	bigFleet, bigMaxProbes, docWorkers                                     int
	l1GB, l2GB, price, tolerance, chatQPS, chatStart, docStart, goal       float64
	traceSLO, traceRelaxedSLO, chatSLO, chatThink, docSLO                  time.Duration
	doc                                                                    workload.LongDoc
}

func (f *capacityFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.workers, "workers", "8,32,128", "fleet sizes for the trace, comma-separated; the trace's rate is scaled with the fleet (start at workers/8 times it)")
	fs.IntVar(&f.bigFleet, "big-fleet", 128, "fleets of at least this many workers search with --big-max-probes runs, to bound the run time (0: no limit)")
	fs.IntVar(&f.bigMaxProbes, "big-max-probes", 4, "runs per search on fleets of --big-fleet workers or more")
	fs.StringVar(&f.strategies, "strategies", "roundrobin,prefixaware,kvaware", "strategies to search")
	fs.StringVar(&f.out, "out", "bench/results/capacity.json", "JSON results path")
	fs.StringVar(&f.imgDir, "img-dir", "docs/img", "directory of the PNG plots")
	fs.StringVar(&f.trace, "trace", "", "Mooncake-format JSONL (default: the shipped synthetic trace)")
	fs.Uint64Var(&f.seed, "seed", 1, "workload seed")
	fs.IntVar(&f.traceMax, "trace-max", 2000, "keep the trace's first N requests (0: all), to bound the run time")
	fs.DurationVar(&f.traceSLO, "trace-slo", 2*time.Second, "TTFT p90 SLO of the trace")
	fs.DurationVar(&f.traceRelaxedSLO, "trace-relaxed-slo", 3*time.Second, "a second, looser TTFT p90 SLO for the trace at the first fleet size (0: none), reusing the first's runs")
	fs.DurationVar(&f.chatSLO, "chat-slo", 500*time.Millisecond, "TTFT p90 SLO of the multi-round chat")
	fs.IntVar(&f.chatUsers, "chat-users", 2000, "chat: users")
	fs.IntVar(&f.chatRounds, "chat-rounds", 3, "chat: rounds per user")
	fs.Float64Var(&f.chatQPS, "chat-qps", 10, "chat: users starting per second at load factor 1")
	fs.DurationVar(&f.chatThink, "chat-think", 10*time.Second, "chat: think time at load factor 1")
	fs.Float64Var(&f.chatStart, "chat-start", 4, "chat: first load factor tried")
	fs.IntVar(&f.chatWorkers, "chat-workers", 8, "chat: fleet size (0: no chat)")
	f.doc = workload.LongDoc{Docs: 256, DocTokens: 16384, Questions: 8, Question: 64, Output: 64, Rate: 4}
	fs.IntVar(&f.docWorkers, "doc-workers", 8, "long-doc: fleet size (0: no long documents)")
	fs.DurationVar(&f.docSLO, "doc-slo", 2*time.Second, "TTFT p90 SLO of the long documents")
	fs.IntVar(&f.doc.Docs, "doc-docs", f.doc.Docs, "long-doc: documents")
	fs.IntVar(&f.doc.DocTokens, "doc-tokens", f.doc.DocTokens, "long-doc: tokens per document")
	fs.IntVar(&f.doc.Questions, "doc-questions", f.doc.Questions, "long-doc: questions per document")
	fs.Float64Var(&f.doc.Rate, "doc-rate", f.doc.Rate, "long-doc: requests per second at load factor 1")
	fs.Float64Var(&f.docStart, "doc-start", 4, "long-doc: first load factor tried")
	fs.StringVar(&f.preset, "preset", "", "timing preset (default: the simulator's)")
	fs.Float64Var(&f.l1GB, "l1-gb", 100, "LMCache L1 per worker of the GPU+L1 configuration, GB")
	fs.Float64Var(&f.l2GB, "l2-gb", 1000, "shared L2 (the cache server) of the GPU+L1+L2 configuration, GB")
	fs.StringVar(&f.l1Events, "l1-events", string(lmcache.EventsStoreOnly), "what each L1 publishes: store-only, none or full")
	fs.Float64Var(&f.price, "price-per-gpu-hour", h100Price, "USD per GPU-hour (default: "+h100PriceSource+")")
	fs.StringVar(&f.priceSource, "price-source", h100PriceSource, "where --price-per-gpu-hour comes from, for the results")
	fs.IntVar(&f.parallel, "parallel", runtime.NumCPU(), "runs at once")
	fs.IntVar(&f.maxProbes, "max-probes", capacity.DefaultBounds().MaxProbes, "runs per search")
	fs.Float64Var(&f.tolerance, "tolerance", capacity.DefaultBounds().Tolerance, "search resolution: stop when the failing load is within 1+this of the passing one")
	fs.Float64Var(&f.goal, "goal", 1.4, "goal: the best warmpath configuration's goodput over round robin on GPU only, at the first fleet size on the trace")
}

// workloads builds the trace at each fleet size and the chat, with their
// SLOs; a request's queueing delay may grow by at most half its SLO.
func (f *capacityFlags) workloads() ([]capacity.Workload, error) {
	tok, err := newTokenizer()
	if err != nil {
		return nil, err
	}
	wf := workloadFlags{name: "trace", trace: f.trace, seed: f.seed}
	wf.tr.Max = f.traceMax
	trace, err := wf.build(tok.Words())
	if err != nil {
		return nil, err
	}
	slo := func(d time.Duration) capacity.SLO { return capacity.SLO{TTFTP90: d, QueueGrowth: d / 2} }
	var out []capacity.Workload
	for i, s := range strings.Split(f.workers, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("--workers: %q is not a fleet size", s)
		}
		w := capacity.Workload{Name: wf.reportName(), Requests: trace, Workers: n, SLO: slo(f.traceSLO), Start: float64(n) / 8,
			Group: "trace/" + s}
		if f.bigFleet > 0 && n >= f.bigFleet {
			w.MaxProbes = f.bigMaxProbes
		}
		out = append(out, w)
		if i == 0 && f.traceRelaxedSLO > 0 {
			w.SLO = slo(f.traceRelaxedSLO)
			out = append(out, w)
		}
	}
	if f.chatWorkers > 0 {
		chat, err := workload.MultiRound{Users: f.chatUsers, Rounds: f.chatRounds, System: 1000, Question: 200, Answer: 100,
			QPS: f.chatQPS, Think: f.chatThink, Seed: f.seed}.Generate(tok.Words())
		if err != nil {
			return nil, err
		}
		out = append(out, capacity.Workload{Name: "multi-round", Requests: chat, Workers: f.chatWorkers, SLO: slo(f.chatSLO), Start: f.chatStart, Group: "chat"})
	}
	if f.docWorkers > 0 {
		d := f.doc
		d.Seed = f.seed
		docs, err := d.Generate(tok.Words())
		if err != nil {
			return nil, err
		}
		out = append(out, capacity.Workload{Name: "long-doc", Requests: docs, Workers: f.docWorkers, SLO: slo(f.docSLO), Start: f.docStart, Group: "doc"})
	}
	return out, nil
}

func runCapacity(args []string) error {
	fs := flag.NewFlagSet("capacity", flag.ContinueOnError)
	var f capacityFlags
	f.register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	mode, err := lmcache.ParseEventMode(f.l1Events)
	if err != nil {
		return fmt.Errorf("--l1-events: %w", err)
	}
	wls, err := f.workloads()
	if err != nil {
		return err
	}
	b := capacity.DefaultBounds()
	b.MaxProbes, b.Tolerance = f.maxProbes, f.tolerance
	caches := []capacity.Cache{{Name: "GPU"}, {Name: "GPU+L1", L1Bytes: int64(f.l1GB * 1e9)},
		{Name: "GPU+L1+L2", L1Bytes: int64(f.l1GB * 1e9), L2Bytes: int64(f.l2GB * 1e9)}}
	cfg := capacity.Config{Fleet: des.Config{Preset: f.preset, L1Events: mode, Model: "meta-llama/Llama-3.1-8B-Instruct"},
		Strategy: strategy.Defaults(), Strategies: strings.Split(f.strategies, ","), Caches: caches, Bounds: b,
		Parallel: f.parallel, Log: os.Stderr}
	began := time.Now()
	res, err := capacity.Run(cfg, wls)
	if err != nil {
		return err
	}
	curves := res.Curves
	base := capacityBaselines
	price := capacity.Price{USDPerGPUHour: f.price, Source: f.priceSource}
	rows := capacity.Rows(curves, price, base)
	goal := capacity.CheckGoal(rows, res.Bounds, wls[0].Name, wls[0].Workers, float64(f.traceSLO.Milliseconds()), f.goal, base)
	if err := capacity.Markdown(os.Stdout, rows); err != nil {
		return err
	}
	fmt.Println()
	if err := capacity.BoundsMarkdown(os.Stdout, rows, res.Bounds, base); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "goal: %+v\n", goal)
	plots, err := capacity.Plots(f.imgDir, curves, rows)
	if err != nil {
		return err
	}
	return report.WriteJSON(f.out, map[string]any{
		"mode": "des", "rows": rows, "curves": curves, "oracle_bounds": res.Bounds, "goal": goal, "price": price, "bounds": b,
		"trace_max": f.traceMax, "l1_gb": f.l1GB, "l2_gb": f.l2GB, "long_doc": f.doc,
		"big_fleet": map[string]int{"workers": f.bigFleet, "max_probes": f.bigMaxProbes}, "l1_events": mode, "strategy_config": cfg.Strategy, "plots": relPaths(plots),
		"queue_growth": "a probe fails when the mean queueing delay (arrival to first scheduling) of the last third of its requests, by arrival, exceeds the first third's by more than half the SLO",
		"slo_ms":       map[string]any{"trace": f.traceSLO.Milliseconds(), "trace_relaxed": f.traceRelaxedSLO.Milliseconds(), "chat": f.chatSLO.Milliseconds(), "long_doc": f.docSLO.Milliseconds()},
		"environment": map[string]any{"go_version": runtime.Version(), "cores": runtime.NumCPU(), "timestamp": time.Now().UTC().Format(time.RFC3339),
			"wall_seconds": time.Since(began).Round(time.Second).Seconds()},
	})
}

// relPaths are the plots' paths with forward slashes, for the results.
func relPaths(ps []string) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = filepath.ToSlash(p)
	}
	return out
}

// updateCapacityHeadline rewrites readme's capacity table from the rows of
// the capacity results at path.
func updateCapacityHeadline(path, readme string) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("capacity headline: %w", err)
	}
	var res struct {
		Rows   []capacity.Row         `json:"rows"`
		Bounds []capacity.OracleBound `json:"oracle_bounds"`
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		return fmt.Errorf("capacity headline: %s: %w", path, err)
	}
	var b strings.Builder
	if err := capacity.Headline(&b, res.Rows, res.Bounds, capacityBaselines); err != nil {
		return err
	}
	return report.UpdateSection(readme, capacity.HeadlineBegin, capacity.HeadlineEnd, "## Capacity and cost", b.String())
}
