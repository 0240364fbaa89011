// Command bench-router measures the latency the warmpath router adds to a
// request and the throughput it sustains, next to nginx and a plain Go
// httputil.ReverseProxy (the "stdlib" target, the net/http floor) proxying
// the same fast fake vLLM workers in the same run, for non-streamed and
// streamed completions with an 8 KB prompt. It writes the figures as JSON (by
// default bench/results/router_overhead.json) and prints progress to
// stderr. See docs/benchmarks.md.
//
// Run it from the repository (`make bench-router`): without --router-bin
// it builds the router (and, without --stdlib-bin, tools/cmd/bench-stdproxy)
// with the go command, which needs the workspace.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/warmpath/warmpath/tools/bench/routerbench"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "bench-router:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	// --quick changes the defaults the other flags start from, so it is
	// read before the flag set is built; explicit flags still win.
	c := routerbench.DefaultConfig()
	if quickRequested(args) {
		c = routerbench.QuickConfig()
	}
	fs := flag.NewFlagSet("bench-router", flag.ContinueOnError)
	fs.Bool("quick", false, "a few seconds of load instead of about two minutes (for tests; figures are rough)")
	out := fs.String("out", "bench/results/router_overhead.json", "where to write the JSON report")
	targets := fs.String("targets", strings.Join(c.Targets, ","), "comma-separated targets: direct, nginx, stdlib, router (direct is always measured)")
	fs.IntVar(&c.Upstreams, "upstreams", c.Upstreams, "fake vLLM workers behind nginx and the router")
	fs.IntVar(&c.Workload.PromptBytes, "prompt-bytes", c.Workload.PromptBytes, "prompt length in bytes")
	fs.IntVar(&c.Workload.Prefixes, "prefixes", c.Workload.Prefixes, "distinct shared prompt prefixes (3/4 of each prompt)")
	fs.IntVar(&c.StreamChunks, "stream-chunks", c.StreamChunks, "text events per streamed reply")
	latConc := fs.String("latency-concurrency", ints(c.LatencyConcurrency), "fixed concurrency levels of the latency phase; the first gives the headline keys")
	fs.IntVar(&c.LatencyRequests, "latency-requests", c.LatencyRequests, "measured requests per target, mode and level")
	fs.IntVar(&c.LatencyRounds, "rounds", c.LatencyRounds, "rounds the latency requests are split into, targets taking turns")
	fs.IntVar(&c.Warmup, "warmup", c.Warmup, "unmeasured requests per target, mode and level before the latency rounds")
	rpsConc := fs.String("rps-concurrency", ints(c.RPSConcurrency), "closed-loop concurrency levels of the throughput phase")
	fs.DurationVar(&c.RPSDuration, "rps-duration", c.RPSDuration, "measured time per throughput level and target")
	fs.DurationVar(&c.RPSWarmup, "rps-warmup", c.RPSWarmup, "unmeasured time before each throughput level")
	fs.DurationVar(&c.RequestTimeout, "timeout", c.RequestTimeout, "timeout of one request")
	fs.StringVar(&c.Nginx.Bin, "nginx-bin", "", "nginx binary (default: nginx on PATH, then /usr/sbin/nginx)")
	fs.StringVar(&c.Nginx.Workers, "nginx-workers", c.Nginx.Workers, "nginx worker_processes: a number or auto (one per core)")
	fs.StringVar(&c.Router.Bin, "router-bin", "", "router binary (default: go build "+routerbench.RouterPackage+")")
	fs.StringVar(&c.Router.Strategy, "router-strategy", c.Router.Strategy, "router --strategy")
	routerArgs := fs.String("router-args", "", "extra router flags, space-separated")
	fs.DurationVar(&c.Router.ReadyTimeout, "router-ready-timeout", c.Router.ReadyTimeout, "longest wait for the router's /ready")
	fs.StringVar(&c.Stdlib.Bin, "stdlib-bin", "", "bench-stdproxy binary for the stdlib target (default: go build "+routerbench.StdlibPackage+")")
	fs.BoolVar(&c.KeepDir, "keep-dir", false, "keep the temporary directory with nginx.conf, the router and stdlib binaries and the proxies' logs")
	quiet := fs.Bool("quiet", false, "no progress on stderr")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: bench-router [flags]\n\n"+
			"Measures the router's added latency and max RPS next to nginx and a plain Go\n"+
			"httputil.ReverseProxy in front of the same fake vLLM workers, and writes them as\n"+
			"JSON (see docs/benchmarks.md). Flags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var err error
	c.Targets = splitList(*targets)
	c.Router.Args = strings.Fields(*routerArgs)
	if c.LatencyConcurrency, err = parseInts(*latConc); err != nil {
		return fmt.Errorf("--latency-concurrency: %w", err)
	}
	if c.RPSConcurrency, err = parseInts(*rpsConc); err != nil {
		return fmt.Errorf("--rps-concurrency: %w", err)
	}
	level := slog.LevelInfo
	if *quiet {
		level = slog.LevelWarn
	}
	c.Log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := routerbench.Run(ctx, c)
	if err != nil {
		return err
	}
	if err := rep.WriteFile(*out); err != nil {
		return err
	}
	summarize(rep, *out)
	return nil
}

// summarize prints the headline figures to stderr.
func summarize(rep *routerbench.Report, out string) {
	m := rep.Metrics()
	w := os.Stderr
	fmt.Fprintf(w, "\nwrote %s\n", out)
	fmt.Fprintf(w, "%-8s %12s %12s %12s | %12s %12s %12s %12s\n", "target", "p50_us", "p99_us", "max_rps",
		"stream_p50", "stream_p99", "ttfb_p99", "stream_rps")
	for _, t := range []string{routerbench.Direct, routerbench.Nginx, routerbench.Stdlib, routerbench.Router} {
		fmt.Fprintf(w, "%-8s %12v %12v %12v | %12v %12v %12v %12v\n", t,
			show(m[t+"_p50_us"]), show(m[t+"_p99_us"]), show(m[t+"_max_rps"]),
			show(m["stream_"+t+"_p50_us"]), show(m["stream_"+t+"_p99_us"]),
			show(m["stream_"+t+"_ttfb_p99_us"]), show(m["stream_"+t+"_max_rps"]))
	}
	fmt.Fprintf(w, "added p99 (us): nginx %v router %v ratio %v (goal <= %v); max rps ratio %v (goal >= %v)\n",
		show(m["nginx_added_p99_us"]), show(m["router_added_p99_us"]), show(m["added_p99_ratio"]),
		routerbench.GoalAddedP99Ratio, show(m["max_rps_ratio"]), routerbench.GoalMaxRPSRatio)
	fmt.Fprintf(w, "stream added p99 (us): nginx %v router %v ratio %v; max rps ratio %v\n",
		show(m["stream_nginx_added_p99_us"]), show(m["stream_router_added_p99_us"]),
		show(m["stream_added_p99_ratio"]), show(m["stream_max_rps_ratio"]))
	fmt.Fprintf(w, "router vs stdlib: added p99 (us) stdlib %v ratio %v, stream stdlib %v ratio %v; max rps ratio %v, stream %v\n",
		show(m["stdlib_added_p99_us"]), show(m["router_vs_stdlib_added_p99_ratio"]),
		show(m["stream_stdlib_added_p99_us"]), show(m["stream_router_vs_stdlib_added_p99_ratio"]),
		show(m["router_vs_stdlib_max_rps_ratio"]), show(m["stream_router_vs_stdlib_max_rps_ratio"]))
	if n, _ := m["errors"].(int); n > 0 {
		fmt.Fprintf(w, "WARNING: %d requests failed; see first_error in the runs\n", n)
	}
}

func show(v any) any {
	if v == nil {
		return "-"
	}
	return v
}

// quickRequested reports whether args set --quick (or -quick) to true.
func quickRequested(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || name != "quick" {
			continue
		}
		if !hasVal {
			return true
		}
		b, err := strconv.ParseBool(val)
		return err == nil && b
	}
	return false
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range splitList(s) {
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}

func ints(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}
