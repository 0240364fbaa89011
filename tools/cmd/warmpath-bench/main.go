// Command warmpath-bench measures routing strategies and cache tiering.
//
//	warmpath-bench demo [flags]   the local stack on simulated workers, every strategy, L1 vs L1+L2
//	warmpath-bench live [flags]   one workload against a running router or worker
//	warmpath-bench des [flags]    a fleet in virtual time, every strategy, on any workload
//	warmpath-bench capacity       goodput under a TTFT SLO and cost per 1K tokens, in des mode
//	warmpath-bench results        bench/results/*.json into docs/benchmarks.md
//
// See docs/benchmarks.md. This file only wires flags to the packages.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/warmpath/warmpath/services/router/strategy"
	"github.com/warmpath/warmpath/tools/bench/demo"
	"github.com/warmpath/warmpath/tools/bench/des"
	"github.com/warmpath/warmpath/tools/bench/live"
	"github.com/warmpath/warmpath/tools/bench/report"
	"github.com/warmpath/warmpath/tools/bench/workload"
	"github.com/warmpath/warmpath/tools/vllmsim/lmcache"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "warmpath-bench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return errors.New("usage: warmpath-bench demo|live|des|capacity|replicas|results [flags] (-h for each command's flags)")
	}
	switch args[0] {
	case "demo":
		return runDemo(ctx, args[1:])
	case "live":
		return runLive(ctx, args[1:])
	case "des":
		return runDES(args[1:])
	case "capacity":
		return runCapacity(args[1:])
	case "replicas":
		return runReplicas(args[1:])
	case "results":
		return runResults(args[1:])
	default:
		return fmt.Errorf("unknown command %q (demo, live, des, capacity, replicas, results)", args[0])
	}
}

// demoWorkloads are the demo's multi-round chat and long-document
// workloads, with arrivals and think times divided by the time scale so
// the load the simulated GPUs see is the one the workload describes. Only
// the workloads named in only are returned.
func demoWorkloads(seed uint64, scale float64, only []string) ([]demo.Workload, error) {
	tok, err := newTokenizer()
	if err != nil {
		return nil, err
	}
	words := tok.Words()
	mr, err := workload.MultiRound{Users: 32, Rounds: 4, System: 1000, Question: 150, Answer: 60, QPS: 4,
		Think: 2 * time.Second, Seed: seed}.Generate(words)
	if err != nil {
		return nil, err
	}
	// Twelve 8K-token documents: a worker's share (three) fits its GPU and
	// L1, the whole set does not, so where a follow-up lands matters.
	ld, err := workload.LongDoc{Docs: 12, DocTokens: 8192, Questions: 5, Question: 32, Output: 32, Rate: 3,
		Seed: seed}.Generate(words)
	if err != nil {
		return nil, err
	}
	var out []demo.Workload
	for _, w := range []struct {
		name string
		reqs []workload.Request
	}{{"multi-round", mr}, {"long-doc", ld}} {
		if !slices.Contains(only, w.name) {
			continue
		}
		reqs, err := live.FromWorkload(tok, w.reqs)
		if err != nil {
			return nil, err
		}
		for i := range reqs {
			reqs[i].Arrival = scaled(reqs[i].Arrival, scale)
			reqs[i].Think = scaled(reqs[i].Think, scale)
		}
		out = append(out, demo.Workload{Name: w.name, Requests: reqs, Oracle: workload.OracleHitRate(w.reqs, 16)})
	}
	return out, nil
}

func runDemo(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	bin := fs.String("bin-dir", "bin", "directory holding vllm-sim, router and cacheserver (make build)")
	out := fs.String("out", "out/demo", "report directory (markdown, JSON, PNGs, logs)")
	workers := fs.Int("workers", 4, "simulated workers")
	// 1: the router's own time (tokenizing, choosing) is real time, and a
	// speed-up would count it that many times over in latencies scaled back.
	scale := fs.Float64("time-scale", 1, "simulator speed-up over the modelled GPU; reported latencies are scaled back (the router's own time is then counted that many times over)")
	strategies := fs.String("strategies", "roundrobin,session,prefixaware,kvaware", "strategies to compare")
	gpuBlocks := fs.Int("gpu-blocks", 1024, "GPU KV blocks of 16 tokens per worker (small, so caching matters)")
	l1GB := fs.Float64("l1-gb", 5, "LMCache L1 per worker, GB (8B model: 32 MiB a 256-token chunk)")
	seed := fs.Uint64("seed", 1, "workload seed")
	window := fs.Float64("load-guard-window", 0, "the router's loadGuard.window (0: its default)")
	only := fs.String("workloads", "multi-round,long-doc", "workloads to run")
	if err := fs.Parse(args); err != nil {
		return err
	}
	workloads, err := demoWorkloads(*seed, *scale, strings.Split(*only, ","))
	if err != nil {
		return err
	}
	cfg := demo.Config{
		BinDir: *bin, OutDir: *out, Model: "meta-llama/Llama-3.1-8B-Instruct", Workers: *workers, TimeScale: *scale,
		Strategies: strings.Split(*strategies, ","),
		Tierings:   []demo.Tiering{{Name: "L1", L2: false}, {Name: "L1+L2", L2: true}},
		Workloads:  workloads,
		SimArgs:    []string{"--preset", "llama-3.1-8b-h100", "--num-gpu-blocks-override", fmt.Sprint(*gpuBlocks), "--max-model-len", "16384", "--lmcache-remote-scale", "1024"},
		SimEnv:     []string{fmt.Sprintf("LMCACHE_MAX_LOCAL_CPU_SIZE=%g", *l1GB)},
		CacheBytes: 2 << 30,
		// LMCache's L1 over Llama-3.1-8B's 128 KiB of KV per token.
		OffloadCapacityTokens: int(*l1GB * 1e9 / 131072),
		LoadGuardWindow:       *window,
		Baseline:              "roundrobin / L1",
		Log:                   os.Stderr,
	}
	res, err := demo.Run(ctx, cfg)
	if err != nil {
		return err
	}
	if err := report.Table(os.Stdout, res.Summaries); err != nil {
		return err
	}
	if err := report.WriteJSON(filepath.Join(*out, "report.json"), res); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(*out, "report.md"))
	if err != nil {
		return err
	}
	defer f.Close()
	if err := report.Markdown(f, res.Summaries, cfg.Baseline); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "report: %s/report.md, report.json, %d plots\n", *out, len(res.Plots))
	return f.Close()
}

func runLive(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("live", flag.ContinueOnError)
	url := fs.String("url", "http://127.0.0.1:8080", "base URL of the router or worker (its /v1/ is used)")
	model := fs.String("model", "meta-llama/Llama-3.1-8B-Instruct", "model to ask for")
	workers := fs.String("workers", "", "comma-separated worker base URLs whose /metrics give hit rates and spread (default: --url)")
	name := fs.String("name", "live", "label of this run in the report")
	scale := fs.Float64("time-scale", 1, "the workers' --time-scale (simulated): arrivals are sent that much faster and latencies scaled back")
	out := fs.String("out", "out/live", "report directory")
	var wf workloadFlags
	wf.register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	tok, wreqs, err := wf.generate()
	if err != nil {
		return err
	}
	reqs, err := live.FromWorkload(tok, wreqs)
	if err != nil {
		return err
	}
	for i := range reqs {
		reqs[i].Arrival, reqs[i].Think = scaled(reqs[i].Arrival, *scale), scaled(reqs[i].Think, *scale)
	}
	ws := []string{*url}
	if *workers != "" {
		ws = strings.Split(*workers, ",")
	}
	r, err := demo.Live(ctx, demo.LiveConfig{BaseURL: *url, Model: *model, Workers: ws, TimeScale: *scale, Log: os.Stderr},
		demo.Workload{Name: wf.name, Requests: reqs})
	if err != nil {
		return err
	}
	r.Name = *name
	r.OracleHitRate = workload.OracleHitRate(wreqs, 16)
	sums := []report.Summary{report.Summarize(r)}
	if err := report.Table(os.Stdout, sums); err != nil {
		return err
	}
	if _, err := report.Plots(*out, wf.name, []report.Run{r}, sums); err != nil {
		return err
	}
	return report.WriteJSON(filepath.Join(*out, "report.json"), map[string]any{"summaries": sums})
}

func runResults(args []string) error {
	fs := flag.NewFlagSet("results", flag.ContinueOnError)
	dir := fs.String("dir", "bench/results", "directory of benchmark JSON")
	doc := fs.String("doc", "docs/benchmarks.md", "page whose generated results section is rewritten")
	readme := fs.String("readme", "", "page whose capacity table is rewritten from <dir>/capacity.json (empty: none)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	md, err := report.RenderResults(*dir)
	if err != nil {
		return err
	}
	if err := report.UpdateDoc(*doc, md); err != nil {
		return err
	}
	if *readme == "" {
		return nil
	}
	return updateCapacityHeadline(filepath.Join(*dir, "capacity.json"), *readme)
}

func runDES(args []string) error {
	fs := flag.NewFlagSet("des", flag.ContinueOnError)
	workers := fs.Int("workers", 8, "simulated workers")
	preset := fs.String("preset", "", "timing preset (default: the simulator's)")
	gpuBlocks := fs.Int("gpu-blocks", 0, "GPU KV blocks of 16 tokens per worker (0: the preset's at 0.9 memory utilisation)")
	l1GB := fs.Float64("l1-gb", 5, "LMCache L1 per worker, GB (0: no LMCache)")
	l1Events := fs.String("l1-events", string(lmcache.EventsStoreOnly), "what each L1 publishes: store-only (current LMCache), none or full; the router keeps its view of L1 accordingly")
	l2GB := fs.Float64("l2-gb", 0, "shared L2 (the cache server) behind every worker's L1, GB (0: none); kvaware follows it as l2view does")
	strategies := fs.String("strategies", strings.Join(strategy.Names, ","), "strategies to compare")
	stratFile := fs.String("strategy-config", "", "JSON file with the router's strategy settings (prefixAware, session, kvAware, loadGuard; as in its config file); default: the router's defaults")
	out := fs.String("out", "", "JSON report path (default: bench/results/routing_<workload>.json)")
	var wf workloadFlags
	wf.register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	_, reqs, err := wf.generate()
	if err != nil {
		return err
	}
	mode, err := lmcache.ParseEventMode(*l1Events)
	if err != nil {
		return fmt.Errorf("--l1-events: %w", err)
	}
	name := wf.reportName()
	cfg := des.Config{Workers: *workers, Preset: *preset, NumGPUBlocks: *gpuBlocks, L1Bytes: int64(*l1GB * 1e9),
		L1Events: mode, L2Bytes: int64(*l2GB * 1e9), Model: "meta-llama/Llama-3.1-8B-Instruct"}
	base := strategy.Defaults()
	if *stratFile != "" {
		b, err := os.ReadFile(*stratFile)
		if err != nil {
			return err
		}
		if err := json.Unmarshal(b, &base); err != nil {
			return fmt.Errorf("%s: %w", *stratFile, err)
		}
	}
	if base.PrefixAware.OffloadCapacityTokens == 0 {
		// As the router should be configured for this L1 (docs/router.md).
		if base.PrefixAware.OffloadCapacityTokens, err = des.L1CapacityTokens(cfg); err != nil {
			return err
		}
	}
	var sums []report.Summary
	for _, s := range strings.Split(*strategies, ",") {
		cfg.Strategy = base
		cfg.Strategy.Name = s
		began := time.Now()
		res, err := des.Run(cfg, reqs)
		if err != nil {
			return err
		}
		r := des.Report(s, name, cfg, reqs, res)
		oracle, err := des.Oracle(cfg, reqs, res)
		if err != nil {
			return err
		}
		r.OracleHitRate, r.OracleTTFTP90 = oracle.HitRate, oracle.TTFTP90
		sums = append(sums, report.Summarize(r))
		fmt.Fprintf(os.Stderr, "des: %s: %d requests, %d engine steps in %v\n", s, len(reqs), res.Steps, time.Since(began).Round(time.Millisecond))
	}
	report.Compare(sums, strategy.NameRoundRobin)
	if err := report.Table(os.Stdout, sums); err != nil {
		return err
	}
	goal := routingGoal(sums, mode)
	fmt.Fprintln(os.Stderr, "goal:", goal)
	suffix := ""
	if *l2GB > 0 {
		suffix = "_l2"
	}
	path := cmp.Or(*out, filepath.Join("bench", "results", "routing_"+name+"_"+string(mode)+suffix+".json"))
	return report.WriteJSON(path, map[string]any{
		"workload": name, "requests": len(reqs), "workers": *workers, "gpu_blocks": *gpuBlocks, "l1_gb": *l1GB, "l1_events": mode,
		"l2_gb": *l2GB, "mode": "des", "strategies": sums, "goal": goal, "strategy_config": base,
		"environment": map[string]any{"go_version": runtime.Version(), "cores": runtime.NumCPU(), "timestamp": time.Now().UTC().Format(time.RFC3339)},
	})
}

// routingGoal checks the bar for kvaware (issue 20). Where L1 publishes
// its stores (store-only, full): at least 90% of the oracle's hit rate,
// imbalance at most 1.25, and a TTFT p90 cut against round robin of at
// least 90% of the oracle's own cut (one worker with the whole fleet's
// cache, no queue: the deepest cut the fleet's memory allows). Where L1
// publishes nothing (none): a lower TTFT p90 and no lower hit rate than
// prefixaware's, which learns from its decisions alike.
func routingGoal(sums []report.Summary, mode lmcache.EventMode) map[string]any {
	byName := map[string]*report.Summary{}
	for i := range sums {
		byName[sums[i].Name] = &sums[i]
	}
	kv, rr, pa := byName[strategy.NameKVAware], byName[strategy.NameRoundRobin], byName[strategy.NamePrefixAware]
	if kv == nil {
		return map[string]any{"met": false, "note": "kvaware not run"}
	}
	g := map[string]any{"kvaware_of_oracle": kv.OfOracle, "kvaware_imbalance": kv.Imbalance, "kvaware_ttft_p90_change_pct": kv.TTFTP90ChangePct}
	if mode == lmcache.EventsNone {
		if pa == nil {
			return map[string]any{"met": false, "note": "prefixaware not run"}
		}
		g["prefixaware_ttft_p90_ms"], g["prefixaware_hit_rate"] = pa.TTFTP90ms, pa.HitRate
		g["met"] = kv.TTFTP90ms < pa.TTFTP90ms && kv.HitRate >= pa.HitRate
		return g
	}
	if rr == nil || rr.TTFTP90ms <= 0 || kv.OracleTTFTP90ms <= 0 {
		return map[string]any{"met": false, "note": "roundrobin or the oracle not run"}
	}
	oracleCut := -report.ChangePct(kv.OracleTTFTP90ms, rr.TTFTP90ms)
	g["oracle_ttft_p90_change_pct"] = -oracleCut
	if oracleCut > 0 {
		g["kvaware_cut_of_oracle_cut"] = -kv.TTFTP90ChangePct / oracleCut
	}
	g["met"] = kv.OfOracle >= 0.9 && kv.Imbalance <= 1.25 && oracleCut > 0 && -kv.TTFTP90ChangePct >= 0.9*oracleCut
	return g
}
