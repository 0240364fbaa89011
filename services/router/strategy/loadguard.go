package strategy

import (
	"math"

	"github.com/warmpath/warmpath/services/router/hrw"
)

// LoadGuardConfig bounds how far a cache-aware strategy may stray from the
// least-loaded endpoint. An endpoint is eligible when
//
//	Load() <= minLoad + max(Window, Ratio × minLoad)
//
// where minLoad is the smallest Load() among the candidates. Window is an
// absolute slack in requests; Ratio scales the slack with load, so a busy
// fleet keeps cache affinity that an absolute window alone would squeeze out.
// The zero value (Window 0, Ratio 0) makes only the least-loaded endpoints
// eligible: cache scores then merely break ties among them. Defaults(): Window
// 1, Ratio 0.2.
type LoadGuardConfig struct {
	// Window is the absolute slack in requests (>= 0).
	Window float64 `json:"window" yaml:"window"`
	// Ratio is the slack relative to the least load (>= 0); 0.1 lets a
	// worker carry 10% more than the least-loaded one.
	Ratio float64 `json:"ratio" yaml:"ratio"`
}

// validate reports a configuration error, naming fields as in the file.
func (c LoadGuardConfig) validate() error {
	if !finiteNonNegative(c.Window) {
		return errorf("loadGuard.window must be a finite number >= 0, got %v", c.Window)
	}
	if !finiteNonNegative(c.Ratio) {
		return errorf("loadGuard.ratio must be a finite number >= 0, got %v", c.Ratio)
	}
	return nil
}

// LoadGuard chooses by score among the endpoints whose load is within the
// configured window of the least-loaded one, so a popular prefix can never
// pin all traffic on one worker (workloads.md, "Known failure modes"), yet
// routing does not collapse to pure least-loaded, which would scatter every
// prefix over every worker. A LoadGuard is an immutable value, safe for
// concurrent use; its zero value is the zero LoadGuardConfig.
type LoadGuard struct {
	cfg LoadGuardConfig
}

// NewLoadGuard returns a guard for cfg. It does not validate cfg; Config's
// Validate does.
func NewLoadGuard(cfg LoadGuardConfig) LoadGuard {
	return LoadGuard{cfg: cfg}
}

// Limit returns the highest load an endpoint may have and still be
// eligible, given the least load among the candidates.
func (g LoadGuard) Limit(minLoad float64) float64 {
	return minLoad + max(g.cfg.Window, g.cfg.Ratio*minLoad)
}

// LimitFor is Limit for the least load among eps (+Inf for none).
func (g LoadGuard) LimitFor(eps []Endpoint) float64 {
	minLoad := math.Inf(1)
	for i := range eps {
		minLoad = min(minLoad, eps[i].Load())
	}
	return g.Limit(minLoad)
}

// Choose returns the index in eps of the eligible endpoint with the highest
// score, or -1 when eps is empty. Ties on score go to the lower Load(), then
// to the higher rendezvous weight of (seed, ID): deterministic for a given
// seed and candidate set whatever the slice order, while different seeds
// (different prompts) spread over the tied endpoints instead of all landing
// on the lexically first one; a weight tie, practically impossible, goes to
// the lower ID. score is called once for each eligible endpoint and never
// for the others, so expensive scoring is not wasted on endpoints the guard
// rules out.
func (g LoadGuard) Choose(eps []Endpoint, seed uint64, score func(i int) float64) int {
	return g.ChooseWithSlack(eps, seed, score, nil)
}

// ChooseWithSlack is Choose where endpoint i may carry slack(i) more load
// than the guard's limit (nil: none); slack is called for every endpoint.
func (g LoadGuard) ChooseWithSlack(eps []Endpoint, seed uint64, score, slack func(i int) float64) int {
	if len(eps) == 0 {
		return -1
	}
	limit := g.LimitFor(eps)
	best := -1
	var bestScore, bestLoad float64
	var bestWeight uint64
	for i := range eps {
		load := eps[i].Load()
		counted := load // the load the guard holds against its limit
		if slack != nil {
			counted -= max(slack(i), 0)
		}
		if counted > limit {
			continue
		}
		s := score(i)
		if best >= 0 {
			if s != bestScore {
				if s < bestScore {
					continue
				}
			} else if load != bestLoad {
				if load > bestLoad {
					continue
				}
			} else {
				w := rendezvous(seed, eps[i].ID)
				if w < bestWeight || (w == bestWeight && eps[i].ID > eps[best].ID) {
					continue
				}
			}
		}
		best, bestScore, bestLoad = i, s, load
		bestWeight = rendezvous(seed, eps[i].ID)
	}
	return best
}

// rendezvous is id's rendezvous weight for key (package hrw).
func rendezvous(key uint64, id string) uint64 {
	return hrw.Weight(key, id)
}

func finiteNonNegative(f float64) bool {
	return f >= 0 && !math.IsInf(f, 1)
}
