// Package capacity finds a fleet's goodput: the highest arrival rate it
// sustains while its TTFT p90 stays within an SLO and its queue does not
// grow, and what a thousand output tokens then cost in GPU time and money.
// It searches over time compression of a workload's arrivals in the des
// mode (tools/bench/des), per routing strategy and cache configuration.
package capacity

import (
	"errors"
	"math"
)

// Bounds bound a search, so that a curve costs a known number of runs.
type Bounds struct {
	// Start is the first load factor tried (1: the workload as recorded).
	Start float64
	// Min and Max bound the factors tried: below Min the SLO is reported
	// unattainable, above Max the goodput is reported capped at Max.
	Min, Max float64
	// MaxProbes bounds the runs of one search, bracket and bisection.
	MaxProbes int
	// Tolerance ends the bisection once the failing factor is within
	// 1+Tolerance of the passing one.
	Tolerance float64
}

// DefaultBounds: start at the recorded rate, 1/4 to 64 times it, seven
// runs, 10%: a bracket by doubling (two or three runs when the start is
// within a factor of 4) and three bisections reach it.
func DefaultBounds() Bounds {
	return Bounds{Start: 1, Min: 0.25, Max: 64, MaxProbes: 7, Tolerance: 0.1}
}

// Outcome is what the search knows after its probes.
type Outcome string

// Outcomes of a search.
const (
	// Bracketed: Lo passed and Hi failed, within the tolerance or not
	// (MaxProbes ran out first).
	Bracketed Outcome = "bracketed"
	// Capped: every factor up to Max passed; the goodput is at least Lo's.
	Capped Outcome = "capped"
	// Unattainable: every factor down to Min failed.
	Unattainable Outcome = "unattainable"
	// Exhausted: MaxProbes ran out before the bracket closed: the
	// goodput is at least Lo's (if any passed), or lies below the lowest
	// factor tried.
	Exhausted Outcome = "exhausted"
)

// Search is a finished search: every probe in the order it ran, and the
// bracket [Lo, Hi) of load factors around the capacity (Lo 0 when none
// passed, Hi 0 when none failed: JSON has no infinity).
type Search struct {
	Probes  []Probe `json:"probes"`
	Lo      float64 `json:"lo_factor"`
	Hi      float64 `json:"hi_factor"`
	Outcome Outcome `json:"outcome"`
}

// Best is the goodput's measurement, if any probe passed: the passing
// probe with the highest measured arrival rate. On an open-loop workload
// that is the probe at Lo; on a chat, whose next rounds wait for answers,
// the measured rate can stop rising with the factor, and a lower factor's
// probe may have carried more.
func (s Search) Best() (Probe, bool) {
	var best Probe
	ok := false
	for _, p := range s.Probes {
		if p.Pass && (!ok || p.OfferedRPS > best.OfferedRPS || (p.OfferedRPS == best.OfferedRPS && p.Factor > best.Factor)) {
			best, ok = p, true
		}
	}
	return best, ok
}

// Find searches for the highest passing load factor: a bracket by doubling
// (or halving) from b.Start, then bisection in log space, within
// b.MaxProbes runs of probe. It assumes passing is monotone in the
// factor; where it is not, it reports one bracket's lower end.
func Find(b Bounds, probe func(factor float64) (Probe, error)) (Search, error) {
	if b.Start <= 0 || b.Min <= 0 || b.Min > b.Start || b.Max < b.Start || b.MaxProbes < 1 || b.Tolerance <= 0 {
		return Search{}, errors.New("capacity: bounds need 0 < min <= start <= max, max probes >= 1 and tolerance > 0")
	}
	var s Search
	try := func(f float64) (bool, error) {
		p, err := probe(f)
		if err != nil {
			return false, err
		}
		p.Factor = f
		s.Probes = append(s.Probes, p)
		return p.Pass, nil
	}
	left := func() bool { return len(s.Probes) < b.MaxProbes }
	pass, err := try(b.Start)
	if err != nil {
		return s, err
	}
	// Double while passing, halve while failing, until the other result,
	// a bound or the probe budget.
	f, step := b.Start, 2.0
	if !pass {
		step = 0.5
	}
	for {
		if pass {
			s.Lo = f
		} else {
			s.Hi = f
		}
		if s.Lo > 0 && s.Hi > 0 {
			break
		}
		f *= step
		switch {
		case f > b.Max:
			s.Outcome = Capped
			return s, nil
		case f < b.Min:
			s.Outcome = Unattainable
			return s, nil
		case !left():
			s.Outcome = Exhausted
			return s, nil
		}
		if pass, err = try(f); err != nil {
			return s, err
		}
	}
	for left() && s.Hi/s.Lo > 1+b.Tolerance {
		m := math.Sqrt(s.Lo * s.Hi)
		if pass, err = try(m); err != nil {
			return s, err
		}
		if pass {
			s.Lo = m
		} else {
			s.Hi = m
		}
	}
	s.Outcome = Bracketed
	return s, nil
}
