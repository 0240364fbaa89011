package capacity

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/warmpath/warmpath/services/router/strategy"
	"github.com/warmpath/warmpath/tools/bench/des"
	"github.com/warmpath/warmpath/tools/bench/workload"
)

// Cache is one cache configuration of the fleet.
type Cache struct {
	Name string `json:"name"`
	// L1Bytes is each worker's LMCache L1 (0: GPU only).
	L1Bytes int64 `json:"l1_bytes"`
	// L2Bytes is the shared L2 behind the L1s (0: none).
	L2Bytes int64 `json:"l2_bytes,omitempty"`
}

// Workload is one search target: requests at their recorded rate, the
// fleet size and the SLO they are judged by.
type Workload struct {
	Name     string
	Requests []workload.Request
	Workers  int
	SLO      SLO
	// Start is the first load factor tried (it scales with the fleet).
	Start float64
	// Group names workloads that share requests and fleet, so a second
	// SLO on them reuses the first's runs.
	Group string
	// MaxProbes, when positive, replaces the bounds' runs per search: a
	// large fleet's runs cost the most.
	MaxProbes int
}

// Config is one experiment.
type Config struct {
	// Fleet is everything of des.Config but the workers, L1 and strategy.
	Fleet des.Config
	// Strategy is the router's configuration; each curve sets its name
	// and, with L1, prefixaware's L1 capacity.
	Strategy   strategy.Config
	Strategies []string
	Caches     []Cache
	Bounds     Bounds
	// Parallel is how many runs go at once (each run is single-threaded).
	Parallel int
	Log      io.Writer
}

// Curve is one strategy and cache configuration's search on one workload.
type Curve struct {
	Workload string  `json:"workload"`
	Workers  int     `json:"workers"`
	SLOms    float64 `json:"ttft_p90_slo_ms"`
	Strategy string  `json:"strategy"`
	Cache    string  `json:"cache"`
	Search   *Search `json:"search,omitempty"`
	// Goodput is the best passing probe (zero when none passed).
	Goodput Probe `json:"goodput"`
}

// Name labels the curve in tables and plots.
func (c Curve) Name() string { return c.Strategy + " / " + c.Cache }

type probeKey struct {
	group, strategy, cache string
	factor                 float64
}

// runner memoises runs, so a workload judged by two SLOs runs once per
// factor: a run's records do not depend on the SLO. So does the oracle's
// bound, per group.
type runner struct {
	cfg    Config
	mu     sync.Mutex
	runs   map[probeKey][]des.Record
	bounds map[string]des.Bound
}

// Result is every curve, and each workload's bound beside them.
type Result struct {
	Curves []Curve
	Bounds []OracleBound
}

// Run searches every workload for every strategy and cache configuration,
// and bounds each workload's goodput with the oracle. Workloads go one
// after another; their curves in parallel.
func Run(cfg Config, wls []Workload) (Result, error) {
	r := &runner{cfg: cfg, runs: map[probeKey][]des.Record{}, bounds: map[string]des.Bound{}}
	var out Result
	for _, w := range wls {
		cs, err := r.workload(w)
		if err != nil {
			return Result{}, err
		}
		out.Curves = append(out.Curves, cs...)
		b, err := r.bound(w)
		if err != nil {
			return Result{}, err
		}
		out.Bounds = append(out.Bounds, b)
	}
	return out, nil
}

// bound is w's oracle bound, with the largest cache configuration: the
// oracle pools its GPUs, L1s and L2. It reads the order and the output
// lengths of the requests from that configuration's first run (at the
// start factor, which every search tries first), made already.
func (r *runner) bound(w Workload) (OracleBound, error) {
	if len(r.cfg.Caches) == 0 || len(r.cfg.Strategies) == 0 {
		return OracleBound{}, errors.New("capacity: the bound needs a cache configuration and a strategy")
	}
	cache := r.cfg.Caches[0]
	for _, c := range r.cfg.Caches[1:] {
		if c.L1Bytes > cache.L1Bytes || (c.L1Bytes == cache.L1Bytes && c.L2Bytes > cache.L2Bytes) {
			cache = c
		}
	}
	b, ok := r.bounds[w.Group]
	if !ok || w.Group == "" {
		strategy := r.cfg.Strategies[0]
		fleet, err := r.fleet(w, cache, strategy)
		if err != nil {
			return OracleBound{}, err
		}
		recs, err := r.records(probeKey{group: w.Group, strategy: strategy, cache: cache.Name, factor: w.Start}, fleet, w.Requests)
		if err != nil {
			return OracleBound{}, fmt.Errorf("capacity: %s bound: %w", w.Name, err)
		}
		if b, err = des.OracleBound(fleet, w.Requests, &des.Result{Records: recs}); err != nil {
			return OracleBound{}, fmt.Errorf("capacity: %s bound: %w", w.Name, err)
		}
		r.bounds[w.Group] = b
	}
	return newOracleBound(w, cache.Name, b), nil
}

func (r *runner) workload(w Workload) ([]Curve, error) {
	var curves []Curve
	for _, s := range r.cfg.Strategies {
		for _, c := range r.cfg.Caches {
			curves = append(curves, Curve{Workload: w.Name, Workers: w.Workers, SLOms: ms(w.SLO.TTFTP90), Strategy: s,
				Cache: c.Name})
		}
	}
	sem := make(chan struct{}, max(r.cfg.Parallel, 1))
	errs := make([]error, len(curves))
	var wg sync.WaitGroup
	for i := range curves {
		cache := r.cfg.Caches[i%len(r.cfg.Caches)]
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			errs[i] = r.curve(w, cache, &curves[i])
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return curves, nil
}

// fleet is the des configuration of one curve.
func (r *runner) fleet(w Workload, cache Cache, strategy string) (des.Config, error) {
	fleet := r.cfg.Fleet
	fleet.Workers, fleet.L1Bytes, fleet.L2Bytes = w.Workers, cache.L1Bytes, cache.L2Bytes
	fleet.Strategy = r.cfg.Strategy
	fleet.Strategy.Name = strategy
	if fleet.Strategy.PrefixAware.OffloadCapacityTokens == 0 {
		// As the router should be configured for this L1 (docs/router.md).
		var err error
		if fleet.Strategy.PrefixAware.OffloadCapacityTokens, err = des.L1CapacityTokens(fleet); err != nil {
			return des.Config{}, err
		}
	}
	return fleet, nil
}

func (r *runner) curve(w Workload, cache Cache, c *Curve) error {
	fleet, err := r.fleet(w, cache, c.Strategy)
	if err != nil {
		return err
	}
	b := r.cfg.Bounds
	b.Start, b.Min, b.Max = w.Start, w.Start*b.Min, w.Start*b.Max
	if w.MaxProbes > 0 {
		b.MaxProbes = w.MaxProbes
	}
	s, err := Find(b, func(f float64) (Probe, error) {
		recs, err := r.records(probeKey{group: w.Group, strategy: c.Strategy, cache: cache.Name, factor: f}, fleet, w.Requests)
		if err != nil {
			return Probe{}, fmt.Errorf("capacity: %s %s at %gx: %w", w.Name, c.Name(), f, err)
		}
		p := Measure(recs, w.Workers, w.SLO)
		if r.cfg.Log != nil {
			fmt.Fprintf(r.cfg.Log, "capacity: %s %dw %s x%.3g: %.2f req/s offered, TTFT p90 %.0f ms, queue %.0f->%.0f ms, pass %v\n",
				w.Name, w.Workers, c.Name(), f, p.OfferedRPS, p.TTFTP90ms, p.Queue.FirstThirdMs, p.Queue.LastThirdMs, p.Pass)
		}
		return p, nil
	})
	if err != nil {
		return err
	}
	c.Search = &s
	c.Goodput, _ = s.Best()
	return nil
}

// records runs the fleet at factor, or returns the run already made.
func (r *runner) records(k probeKey, fleet des.Config, reqs []workload.Request) ([]des.Record, error) {
	if k.group != "" {
		r.mu.Lock()
		recs, ok := r.runs[k]
		r.mu.Unlock()
		if ok {
			return recs, nil
		}
	}
	res, err := des.Run(fleet, Compress(reqs, k.factor))
	if err != nil {
		return nil, err
	}
	if k.group != "" {
		r.mu.Lock()
		r.runs[k] = res.Records
		r.mu.Unlock()
	}
	return res.Records, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
