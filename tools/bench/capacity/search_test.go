package capacity

import (
	"errors"
	"math"
	"testing"
)

// fakeFleet passes every factor up to capacity, as a fleet with a known
// capacity would, and counts its runs.
type fakeFleet struct {
	capacity float64
	runs     int
}

func (f *fakeFleet) probe(factor float64) (Probe, error) {
	f.runs++
	return Probe{Pass: factor <= f.capacity, OfferedRPS: factor}, nil
}

func TestFindLocatesKnownCapacity(t *testing.T) {
	for _, tc := range []struct {
		name     string
		capacity float64
		start    float64
		want     Outcome
	}{
		{"above start", 5.3, 1, Bracketed},
		{"below start", 0.37, 1, Bracketed},
		{"at start", 1, 1, Bracketed},
		{"just below a doubling", 3.99, 1, Bracketed},
		{"scaled start", 13, 4, Bracketed},
		{"beyond max", 1000, 1, Capped},
		{"below min", 0.1, 1, Unattainable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := Bounds{Start: tc.start, Min: tc.start / 4, Max: 64 * tc.start, MaxProbes: 12, Tolerance: 0.1}
			f := &fakeFleet{capacity: tc.capacity}
			s, err := Find(b, f.probe)
			if err != nil {
				t.Fatal(err)
			}
			if s.Outcome != tc.want {
				t.Fatalf("outcome %s, want %s (probes %+v)", s.Outcome, tc.want, s.Probes)
			}
			if f.runs != len(s.Probes) || f.runs > b.MaxProbes {
				t.Fatalf("%d runs, %d probes recorded, budget %d", f.runs, len(s.Probes), b.MaxProbes)
			}
			switch tc.want {
			case Bracketed:
				// The capacity lies in [Lo, Hi), within the tolerance.
				if s.Lo > tc.capacity || s.Hi <= tc.capacity {
					t.Fatalf("bracket [%g, %g) misses capacity %g", s.Lo, s.Hi, tc.capacity)
				}
				if s.Hi/s.Lo > 1+b.Tolerance {
					t.Fatalf("bracket [%g, %g) wider than the tolerance", s.Lo, s.Hi)
				}
				best, ok := s.Best()
				if !ok || best.Factor != s.Lo || !best.Pass {
					t.Fatalf("best %+v, %v; want the passing probe at %g", best, ok, s.Lo)
				}
			case Capped:
				if s.Hi != 0 || s.Lo != b.Max {
					t.Fatalf("capped search: [%g, %g), want lo %g and no failure", s.Lo, s.Hi, b.Max)
				}
			case Unattainable:
				if _, ok := s.Best(); ok || s.Lo != 0 || s.Hi != b.Min {
					t.Fatalf("unattainable search: [%g, %g), want no pass and hi %g", s.Lo, s.Hi, b.Min)
				}
			}
		})
	}
}

// TestFindBracketIsMonotone: every probe at or below Lo passed and every
// probe at or above Hi failed, and the bracket only narrows.
func TestFindBracketIsMonotone(t *testing.T) {
	for _, capacity := range []float64{0.3, 0.9, 1.7, 2.5, 7.1, 33} {
		f := &fakeFleet{capacity: capacity}
		s, err := Find(Bounds{Start: 1, Min: 0.25, Max: 64, MaxProbes: 7, Tolerance: 0.1}, f.probe)
		if err != nil {
			t.Fatal(err)
		}
		lo, hi := 0.0, math.Inf(1)
		for _, p := range s.Probes {
			if p.Pass {
				if p.Factor <= lo {
					t.Fatalf("capacity %g: pass at %g after lo %g", capacity, p.Factor, lo)
				}
				lo = p.Factor
			} else {
				if p.Factor >= hi {
					t.Fatalf("capacity %g: failure at %g after hi %g", capacity, p.Factor, hi)
				}
				hi = p.Factor
			}
			if lo >= hi {
				t.Fatalf("capacity %g: bracket crossed: [%g, %g)", capacity, lo, hi)
			}
		}
		if s.Lo != lo || (s.Hi != 0 && s.Hi != hi) {
			t.Fatalf("capacity %g: search reports [%g, %g), probes say [%g, %g)", capacity, s.Lo, s.Hi, lo, hi)
		}
	}
}

func TestFindBudgetExhausted(t *testing.T) {
	for _, tc := range []struct {
		name     string
		capacity float64
		wantLo   float64
	}{
		{"still passing", 100, 4},
		{"still failing", 0.01, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeFleet{capacity: tc.capacity}
			s, err := Find(Bounds{Start: 1, Min: 1.0 / 64, Max: 64, MaxProbes: 3, Tolerance: 0.1}, f.probe)
			if err != nil {
				t.Fatal(err)
			}
			if s.Outcome != Exhausted || len(s.Probes) != 3 || s.Lo != tc.wantLo {
				t.Fatalf("got %s after %d probes, lo %g; want exhausted after 3, lo %g", s.Outcome, len(s.Probes), s.Lo, tc.wantLo)
			}
		})
	}
}

func TestBestIsTheHighestMeasuredRate(t *testing.T) {
	s := Search{Lo: 4, Hi: 5, Probes: []Probe{
		{Factor: 2, OfferedRPS: 300, Pass: true},
		{Factor: 4, OfferedRPS: 290, Pass: true}, // a closed loop carrying less
		{Factor: 5, OfferedRPS: 400, Pass: false},
	}}
	if b, ok := s.Best(); !ok || b.Factor != 2 {
		t.Fatalf("best %+v, %v; want the probe at factor 2", b, ok)
	}
	if _, ok := (Search{Probes: []Probe{{Factor: 1, OfferedRPS: 9}}}).Best(); ok {
		t.Fatal("a search with no pass has a best probe")
	}
}

func TestFindErrors(t *testing.T) {
	boom := errors.New("boom")
	if _, err := Find(DefaultBounds(), func(float64) (Probe, error) { return Probe{}, boom }); !errors.Is(err, boom) {
		t.Fatalf("err %v, want the probe's", err)
	}
	for _, b := range []Bounds{
		{Start: 0, Min: 0.1, Max: 2, MaxProbes: 3, Tolerance: 0.1},
		{Start: 1, Min: 2, Max: 4, MaxProbes: 3, Tolerance: 0.1},
		{Start: 1, Min: 0.5, Max: 0.9, MaxProbes: 3, Tolerance: 0.1},
		{Start: 1, Min: 0.5, Max: 2, MaxProbes: 0, Tolerance: 0.1},
		{Start: 1, Min: 0.5, Max: 2, MaxProbes: 3, Tolerance: 0},
	} {
		if _, err := Find(b, (&fakeFleet{capacity: 1}).probe); err == nil {
			t.Errorf("bounds %+v accepted", b)
		}
	}
}
