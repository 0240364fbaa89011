// Command bench-router-scale measures how the router's own cost grows
// with its fleet: CPU time per request, idle CPU, RSS and Go heap of the
// live router binary in front of 8, 32 and 128 fake workers, for each
// strategy beside round robin. It writes bench/results/router_scale.json
// (docs/benchmarks.md). Without --router-bin it builds the router with
// the go command, which needs the workspace (`make bench-router-scale`).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/warmpath/warmpath/libs/testnet"
	"github.com/warmpath/warmpath/tools/bench/report"
	"github.com/warmpath/warmpath/tools/bench/routerbench"
	"github.com/warmpath/warmpath/tools/bench/routerscale"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "bench-router-scale:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("bench-router-scale", flag.ContinueOnError)
	fleets := fs.String("workers", "8,32,128", "fleet sizes, comma-separated")
	strategies := fs.String("strategies", "roundrobin,prefixaware,kvaware", "router strategies; roundrobin is the floor the others are compared with")
	out := fs.String("out", "bench/results/router_scale.json", "report path")
	bin := fs.String("router-bin", "", "router binary (default: go build it)")
	requests := fs.Int("requests", 4000, "measured requests per fleet size and strategy")
	warmup := fs.Int("warmup", 400, "unmeasured requests first")
	conc := fs.Int("concurrency", 8, "closed-loop clients")
	idle := fs.Duration("idle", 2*time.Second, "time the router is watched with no traffic, for its probes' and scrapes' CPU")
	keep := fs.Bool("keep-dir", false, "keep the temp dir (router binary and logs)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var sizes []int
	for _, s := range strings.Split(*fleets, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return fmt.Errorf("--workers: %q is not a fleet size", s)
		}
		sizes = append(sizes, n)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	dir, err := os.MkdirTemp("", "bench-router-scale-")
	if err != nil {
		return err
	}
	if !*keep {
		defer os.RemoveAll(dir)
	}
	if *bin == "" {
		if *bin, err = routerbench.BuildRouter(ctx, dir); err != nil {
			return err
		}
	}
	// kvaware tokenizes in process and takes KV events on one bound
	// socket, which the fake workers never join: its index stays empty.
	events, err := testnet.PickAddr(ctx)
	if err != nil {
		return err
	}
	const model = "bench-model"
	cfg := routerscale.Config{Fleets: sizes, Strategies: strings.Split(*strategies, ","), RouterBin: *bin, Dir: dir,
		StrategyArgs: map[string][]string{"kvaware": {"--kv-events-bind", "tcp://" + events, "--tokenizer-local", model + "=cl100k_base"}},
		Requests:     *requests, Warmup: *warmup, Concurrency: *conc, Idle: *idle,
		Workload: routerbench.WorkloadSpec{Model: model, PromptBytes: 8192, Prefixes: 4, PerPrefix: 16, MaxTokens: 16, Seed: 1},
		Log:      os.Stderr}
	began := time.Now()
	rows, err := routerscale.Run(ctx, cfg)
	if err != nil {
		return err
	}
	load, _ := os.ReadFile("/proc/loadavg")
	return report.WriteJSON(*out, map[string]any{
		"rows": rows, "requests": *requests, "warmup": *warmup, "concurrency": *conc, "idle_s": idle.Seconds(),
		"prompt_bytes": cfg.Workload.PromptBytes, "router_args": cfg.StrategyArgs,
		"method": "router CPU from /proc/<pid>/stat utime+stime over the measured requests; net of the idle rate (probes, scrapes) over as long; RSS from /proc/<pid>/status; Go heap from the router's own /metrics after the run",
		"environment": map[string]any{"go_version": runtime.Version(), "cores": runtime.NumCPU(), "timestamp": time.Now().UTC().Format(time.RFC3339),
			"loadavg_at_end": strings.TrimSpace(string(load)), "wall_seconds": time.Since(began).Round(time.Second).Seconds()},
	})
}
