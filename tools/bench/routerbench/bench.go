package routerbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"time"
)

// Target names, in the order a run starts and reports them.
const (
	Direct = "direct"
	Nginx  = "nginx"
	Stdlib = "stdlib" // net/http/httputil.ReverseProxy (tools/cmd/bench-stdproxy)
	Router = "router"
)

// benchModel is the one model the fake workers serve.
const benchModel = "bench-model"

// Config is one benchmark run. Counts are per target, per mode (streamed or
// not) and per concurrency level.
type Config struct {
	// Targets is a subset of Direct, Nginx, Stdlib and Router; Direct is always
	// measured, because added latency is relative to it.
	Targets []string
	// Upstreams is how many fake workers run; nginx and the router balance
	// over all of them (so does the stdlib proxy), direct requests rotate
	// through them.
	Upstreams int
	// StreamChunks is how many text events a streamed reply carries.
	StreamChunks int
	// Workload describes the prompts.
	Workload WorkloadSpec

	// LatencyConcurrency are the fixed concurrency levels of the latency
	// phase; the first is the one the headline *_p50_us/*_p99_us keys use.
	LatencyConcurrency []int
	// LatencyRequests are measured per level, split into LatencyRounds
	// rounds in which the targets take turns; Warmup requests per level go
	// first and are not measured.
	LatencyRequests int
	LatencyRounds   int
	Warmup          int

	// RPSConcurrency are the closed-loop levels of the throughput phase,
	// each run for RPSWarmup (not measured) plus RPSDuration.
	RPSConcurrency []int
	RPSDuration    time.Duration
	RPSWarmup      time.Duration

	// RequestTimeout bounds one request.
	RequestTimeout time.Duration

	Nginx  NginxConfig  // Bin and Workers are used; the rest is filled in
	Router RouterConfig // Bin, Strategy, Args and ReadyTimeout are used
	Stdlib StdlibConfig // Bin and ReadyTimeout are used

	// KeepDir keeps the run's temporary directory (nginx.conf, the router
	// and stdlib binaries, the proxies' logs) instead of removing it, and logs its path.
	KeepDir bool

	// Log receives progress; nil discards it.
	Log *slog.Logger
}

// DefaultConfig is the full run `make bench-router` does: about
// two minutes of load with all four targets on a 2-core machine.
func DefaultConfig() Config {
	return Config{
		Targets:      []string{Direct, Nginx, Stdlib, Router},
		Upstreams:    2,
		StreamChunks: 8,
		Workload: WorkloadSpec{
			Model: benchModel, PromptBytes: 8192, Prefixes: 4, PerPrefix: 16, MaxTokens: 16, Seed: 1,
		},
		LatencyConcurrency: []int{1, 8},
		LatencyRequests:    3000,
		LatencyRounds:      5,
		Warmup:             200,
		RPSConcurrency:     []int{1, 4, 16, 64},
		RPSDuration:        3 * time.Second,
		RPSWarmup:          250 * time.Millisecond,
		RequestTimeout:     10 * time.Second,
		Nginx:              NginxConfig{Workers: "auto"},
		Router:             RouterConfig{Strategy: "prefixaware", ReadyTimeout: 30 * time.Second},
		Stdlib:             StdlibConfig{ReadyTimeout: 30 * time.Second},
	}
}

// QuickConfig is DefaultConfig cut to a few seconds of load, for tests; its
// figures only show that everything is wired up.
func QuickConfig() Config {
	c := DefaultConfig()
	c.LatencyConcurrency = []int{1, 4}
	c.LatencyRequests = 200
	c.LatencyRounds = 2
	c.Warmup = 20
	c.RPSConcurrency = []int{1, 4}
	c.RPSDuration = 300 * time.Millisecond
	c.RPSWarmup = 50 * time.Millisecond
	return c
}

func (c *Config) validate() error {
	var errs []error
	for _, t := range c.Targets {
		if t != Direct && t != Nginx && t != Stdlib && t != Router {
			errs = append(errs, fmt.Errorf("unknown target %q (want direct, nginx, stdlib or router)", t))
		}
	}
	if !slices.Contains(c.Targets, Direct) {
		c.Targets = append([]string{Direct}, c.Targets...)
	}
	if c.Upstreams < 1 || c.StreamChunks < 1 {
		errs = append(errs, errors.New("upstreams and stream chunks must be at least 1"))
	}
	if len(c.LatencyConcurrency) == 0 || len(c.RPSConcurrency) == 0 {
		errs = append(errs, errors.New("latency and rps concurrency lists must not be empty"))
	}
	for _, n := range append(slices.Clone(c.LatencyConcurrency), c.RPSConcurrency...) {
		if n < 1 {
			errs = append(errs, fmt.Errorf("concurrency %d < 1", n))
		}
	}
	if c.LatencyRequests < 1 || c.LatencyRounds < 1 || c.LatencyRequests < c.LatencyRounds || c.Warmup < 0 {
		errs = append(errs, errors.New("need latency requests >= rounds >= 1 and warmup >= 0"))
	}
	if c.RPSDuration <= 0 || c.RPSWarmup < 0 || c.RequestTimeout <= 0 {
		errs = append(errs, errors.New("rps duration and request timeout must be positive, rps warmup not negative"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("routerbench: config: %w", err)
	}
	return nil
}

// Run starts the fake workers and the configured proxies, measures every
// target and returns the report. It stops everything it started before it
// returns. A run cut short by ctx returns ctx's error and no report.
func Run(ctx context.Context, c Config) (*Report, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	if c.Log == nil {
		c.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	w, err := NewWorkload(c.Workload)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "bench-router-")
	if err != nil {
		return nil, fmt.Errorf("routerbench: %w", err)
	}
	defer func() {
		if c.KeepDir {
			c.Log.Info("kept the run's files", "dir", dir)
			return
		}
		_ = os.RemoveAll(dir)
	}()
	// nginx's workers run as nobody when the benchmark runs as root; they
	// must be able to walk down to their temp paths.
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, fmt.Errorf("routerbench: %w", err)
	}

	ups, err := startUpstreams(ctx, c.Upstreams, c.Workload.Model, c.StreamChunks)
	if err != nil {
		return nil, err
	}
	defer ups.close()
	rep := newReport(c)
	targets, stop, err := startTargets(ctx, &c, dir, ups, &rep.Environment)
	defer stop()
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, t := range targets {
			t.Close()
		}
	}()
	rep.Latency = latencyPhase(ctx, c, targets, w)
	rep.Throughput = throughputPhase(ctx, c, targets, w)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return rep, nil
}

// startTargets starts nginx, the stdlib proxy and the router as configured and returns the
// targets in c.Targets order, and a function that stops the proxies.
func startTargets(ctx context.Context, c *Config, dir string, ups *upstreams, env *Environment) ([]*Target, func(), error) {
	var proxies []*Proxy
	stop := func() {
		for _, p := range proxies {
			if err := p.Stop(5 * time.Second); err != nil {
				c.Log.Warn("stop", "proxy", p.Name, "err", err)
			}
		}
	}
	maxConns := slices.Max(append(slices.Clone(c.LatencyConcurrency), c.RPSConcurrency...))
	var targets []*Target
	for _, name := range c.Targets {
		var p *Proxy
		var err error
		switch name {
		case Direct:
			targets = append(targets, NewTarget(Direct, maxConns, c.RequestTimeout, ups.urls...))
			continue
		case Nginx:
			nc := c.Nginx
			nc.Upstreams, nc.Dir = ups.addrs, mkdir(dir, "nginx")
			c.Log.Info("starting nginx", "workers", nc.Workers)
			p, err = StartNginx(ctx, nc)
		case Stdlib:
			sc := c.Stdlib
			sc.Workers, sc.Dir = ups.urls, mkdir(dir, "stdlib")
			c.Log.Info("starting stdlib proxy", "bin", sc.Bin)
			p, err = StartStdlib(ctx, sc)
		case Router:
			rc := c.Router
			rc.Workers, rc.Dir = ups.urls, mkdir(dir, "router")
			c.Log.Info("starting router", "bin", rc.Bin, "strategy", rc.Strategy)
			p, err = StartRouter(ctx, rc)
		}
		if err != nil {
			return nil, stop, err
		}
		proxies = append(proxies, p)
		env.addProxy(p)
		targets = append(targets, NewTarget(name, maxConns, c.RequestTimeout, p.URL))
	}
	return targets, stop, nil
}

// mkdir returns dir/name after creating it; a failure surfaces when the
// proxy writes there.
func mkdir(dir, name string) string {
	p := dir + "/" + name
	_ = os.Mkdir(p, 0o755)
	return p
}

// latencyPhase measures each target at each fixed concurrency, streamed and
// not. Within a level the targets take turns in rounds, in an order that
// rotates each round, so slow drifts of the machine spread over all.
func latencyPhase(ctx context.Context, c Config, targets []*Target, w Workload) []Step {
	var steps []Step
	for _, stream := range []bool{false, true} {
		bodies := w.bodies(stream)
		for _, conc := range c.LatencyConcurrency {
			if ctx.Err() != nil {
				return steps
			}
			c.Log.Info("latency", "stream", stream, "concurrency", conc, "requests", c.LatencyRequests)
			merged := make([]outcome, len(targets))
			for i, t := range targets {
				warm := runCount(ctx, load{t, bodies, stream, conc}, c.Warmup)
				merged[i].errors, merged[i].firstErr = warm.errors, warm.firstErr
			}
			for r := range c.LatencyRounds {
				n := c.LatencyRequests / c.LatencyRounds
				if r < c.LatencyRequests%c.LatencyRounds {
					n++
				}
				for _, i := range rotation(len(targets), r) {
					merged[i].add(runCount(ctx, load{targets[i], bodies, stream, conc}, n))
				}
			}
			for i, t := range targets {
				st := merged[i].step(load{t, bodies, stream, conc})
				c.Log.Info("latency result", "target", t.Name, "stream", stream, "concurrency", conc,
					"p50_us", st.Latency.P50US, "p99_us", st.Latency.P99US, "errors", st.Errors)
				steps = append(steps, st)
			}
		}
	}
	return steps
}

// throughputPhase runs each target in a closed loop at each concurrency
// level, streamed and not; targets take turns at every level.
func throughputPhase(ctx context.Context, c Config, targets []*Target, w Workload) []Step {
	var steps []Step
	for _, stream := range []bool{false, true} {
		bodies := w.bodies(stream)
		for k, conc := range c.RPSConcurrency {
			for _, i := range rotation(len(targets), k) {
				if ctx.Err() != nil {
					return steps
				}
				l := load{targets[i], bodies, stream, conc}
				st := runFor(ctx, l, c.RPSWarmup, c.RPSDuration).step(l)
				c.Log.Info("throughput", "target", st.Target, "stream", stream, "concurrency", conc,
					"rps", st.RPS, "p99_us", st.Latency.P99US, "errors", st.Errors)
				steps = append(steps, st)
			}
		}
	}
	return steps
}

// rotation returns 0..n-1 rotated left by k.
func rotation(n, k int) []int {
	idx := make([]int, n)
	for i := range idx {
		idx[i] = (i + k) % n
	}
	return idx
}

func (w Workload) bodies(stream bool) [][]byte {
	if stream {
		return w.Stream
	}
	return w.Plain
}

// upstreams are the running fake workers.
type upstreams struct {
	servers []*http.Server
	addrs   []string // host:port
	urls    []string // http://host:port
}

// startUpstreams serves n fake workers on loopback ports in this process.
func startUpstreams(ctx context.Context, n int, model string, chunks int) (*upstreams, error) {
	u := &upstreams{}
	var lc net.ListenConfig
	for range n {
		ln, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
		if err != nil {
			u.close()
			return nil, fmt.Errorf("routerbench: upstream listen: %w", err)
		}
		srv := &http.Server{Handler: NewUpstream(model, chunks), ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.Serve(ln) }() // returns when close shuts srv down
		u.servers = append(u.servers, srv)
		u.addrs = append(u.addrs, ln.Addr().String())
		u.urls = append(u.urls, "http://"+ln.Addr().String())
	}
	return u, nil
}

func (u *upstreams) close() {
	for _, s := range u.servers {
		_ = s.Close()
	}
}
