package main

import (
	"cmp"
	"flag"
	"fmt"
	"math"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/warmpath/warmpath/services/router/strategy"
	"github.com/warmpath/warmpath/tools/bench/des"
	"github.com/warmpath/warmpath/tools/bench/report"
	"github.com/warmpath/warmpath/tools/vllmsim/lmcache"
)

// replicaAgreementPoints is how far (in hit-rate points) N router
// replicas may fall below one router (issue 21).
const replicaAgreementPoints = 2.0

// runReplicas runs the des mode with the requests split at random across
// N router replicas, for each N and strategy: replicas that do not agree
// on where a prompt's cache is lose hit rate against one router.
func runReplicas(args []string) error {
	fs := flag.NewFlagSet("replicas", flag.ContinueOnError)
	workers := fs.Int("workers", 8, "simulated workers")
	l1GB := fs.Float64("l1-gb", 100, "LMCache L1 per worker, GB (0: no LMCache)")
	l1Events := fs.String("l1-events", string(lmcache.EventsStoreOnly), "what each L1 publishes: store-only, none or full")
	strategies := fs.String("strategies", strings.Join(strategy.Names, ","), "strategies to compare")
	routers := fs.String("routers", "1,3,5", "router replica counts to compare (the first is the baseline)")
	scrape := fs.Float64("scrape-seconds", 1, "how often each replica reads the workers' load (the router's --scrape-interval)")
	peerLoad := fs.Float64("peer-load-seconds", 0.1, "how often each relaying replica reads the others' in-flight counts (the router's --peer-load-interval; negative: never)")
	forward := fs.Bool("forward", true, "each replica forwards a request to the replica owning its head (the router's --peers); false: the replica a request reaches decides")
	out := fs.String("out", "", "JSON report path (default: bench/results/replicas_<workload>.json)")
	var wf workloadFlags
	wf.register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	var ns []int
	for f := range strings.SplitSeq(*routers, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return fmt.Errorf("--routers: %q is not a replica count", f)
		}
		ns = append(ns, n)
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
	cfg := des.Config{Workers: *workers, L1Bytes: int64(*l1GB * 1e9), L1Events: mode, Model: "meta-llama/Llama-3.1-8B-Instruct",
		ScrapeSeconds: *scrape, PeerLoadSeconds: *peerLoad, Seed: 1, Forward: *forward}
	base := strategy.Defaults()
	if base.PrefixAware.OffloadCapacityTokens, err = des.L1CapacityTokens(cfg); err != nil {
		return err
	}
	type row struct {
		Strategy string         `json:"strategy"`
		Routers  int            `json:"routers"`
		Summary  report.Summary `json:"summary"`
		DropPts  float64        `json:"hit_rate_drop_points"`
		Within   bool           `json:"within_bound"`
		WallSec  float64        `json:"wall_seconds"`
	}
	var rows []row
	agree := map[string]bool{}
	fmt.Printf("%-12s %7s %9s %9s %10s %9s\n", "strategy", "routers", "hit rate", "drop pts", "TTFT p90", "imbalance")
	for _, s := range strings.Split(*strategies, ",") {
		agree[s] = true
		var baseline float64
		for k, n := range ns {
			cfg.Strategy, cfg.Routers = base, n
			cfg.Strategy.Name = s
			began := time.Now()
			res, err := des.Run(cfg, reqs)
			if err != nil {
				return fmt.Errorf("%s, %d routers: %w", s, n, err)
			}
			sum := report.Summarize(des.Report(s, name, cfg, reqs, res))
			if k == 0 {
				baseline = sum.HitRate
			}
			drop := 100 * (baseline - sum.HitRate)
			within := drop <= replicaAgreementPoints
			agree[s] = agree[s] && within
			rows = append(rows, row{Strategy: s, Routers: n, Summary: sum, DropPts: math.Round(drop*100) / 100, Within: within,
				WallSec: time.Since(began).Seconds()})
			fmt.Printf("%-12s %7d %8.1f%% %9.2f %8.0fms %9.2f\n", s, n, 100*sum.HitRate, drop, sum.TTFTP90ms, sum.Imbalance)
		}
	}
	path := cmp.Or(*out, filepath.Join("bench", "results", "replicas_"+name+".json"))
	return report.WriteJSON(path, map[string]any{
		"workload": name, "requests": len(reqs), "workers": *workers, "l1_gb": *l1GB, "l1_events": mode, "routers": ns,
		"scrape_seconds": *scrape, "peer_load_seconds": *peerLoad, "forward": *forward, "mode": "des", "runs": rows, "bound_points": replicaAgreementPoints, "agree": agree,
		"environment": map[string]any{"go_version": runtime.Version(), "cores": runtime.NumCPU(), "timestamp": time.Now().UTC().Format(time.RFC3339)},
	})
}
