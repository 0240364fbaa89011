// Command warmpath-bench measures routing strategies and cache tiering.
//
//	warmpath-bench demo [flags]   the local stack on simulated workers, every strategy, L1 vs L1+L2
//
// See docs/benchmarks.md. This file only wires flags to the packages.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/warmpath/warmpath/tools/bench/demo"
	"github.com/warmpath/warmpath/tools/bench/report"
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
		return errors.New("usage: warmpath-bench demo [flags]")
	}
	switch args[0] {
	case "demo":
		return runDemo(ctx, args[1:])
	default:
		return fmt.Errorf("unknown command %q (demo)", args[0])
	}
}

func runDemo(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	bin := fs.String("bin-dir", "bin", "directory holding vllm-sim, router and cacheserver (make build)")
	out := fs.String("out", "out/demo", "report directory (markdown, JSON, PNGs, logs)")
	workers := fs.Int("workers", 4, "simulated workers")
	scale := fs.Float64("time-scale", 20, "simulator speed-up over the modelled GPU; reported latencies are scaled back")
	strategies := fs.String("strategies", "roundrobin,session,prefixaware,kvaware", "strategies to compare")
	gpuBlocks := fs.Int("gpu-blocks", 1024, "GPU KV blocks of 16 tokens per worker (small, so caching matters)")
	l1GB := fs.Float64("l1-gb", 1, "LMCache L1 per worker, GB (8B model: 32 MiB a 256-token chunk)")
	seed := fs.Uint64("seed", 1, "workload seed")
	if err := fs.Parse(args); err != nil {
		return err
	}
	_ = seed
	cfg := demo.Config{
		BinDir: *bin, OutDir: *out, Model: "meta-llama/Llama-3.1-8B-Instruct", Workers: *workers, TimeScale: *scale,
		Strategies: strings.Split(*strategies, ","),
		Tierings:   []demo.Tiering{{Name: "L1", L2: false}, {Name: "L1+L2", L2: true}},
		Workloads:  tmpWorkloads(),
		SimArgs:    []string{"--preset", "llama-3.1-8b-h100", "--num-gpu-blocks-override", fmt.Sprint(*gpuBlocks), "--max-model-len", "16384"},
		SimEnv:     []string{fmt.Sprintf("LMCACHE_MAX_LOCAL_CPU_SIZE=%g", *l1GB)},
		CacheBytes: 2 << 30,
		Baseline:   "roundrobin / L1",
		Log:        os.Stderr,
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
