package strategy

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// eps builds endpoints named a, b, c, ... with the given in-flight loads.
func eps(loads ...int) []Endpoint {
	out := make([]Endpoint, len(loads))
	for i, l := range loads {
		out[i] = Endpoint{ID: string(rune('a' + i)), InFlight: l}
	}
	return out
}

func TestLoadGuardLimit(t *testing.T) {
	tests := []struct {
		name    string
		cfg     LoadGuardConfig
		minLoad float64
		want    float64
	}{
		{"zero guard", LoadGuardConfig{}, 5, 5},
		{"window only", LoadGuardConfig{Window: 2}, 5, 7},
		{"ratio only", LoadGuardConfig{Ratio: 0.5}, 10, 15},
		{"window beats small ratio", LoadGuardConfig{Window: 2, Ratio: 0.1}, 10, 12},
		{"ratio beats window at high load", LoadGuardConfig{Window: 2, Ratio: 0.1}, 50, 55},
		{"idle fleet", LoadGuardConfig{Window: 2, Ratio: 0.1}, 0, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := NewLoadGuard(tt.cfg).Limit(tt.minLoad); got != tt.want {
				t.Errorf("Limit(%v) = %v, want %v", tt.minLoad, got, tt.want)
			}
		})
	}
}

func TestLoadGuardChoose(t *testing.T) {
	tests := []struct {
		name   string
		cfg    LoadGuardConfig
		loads  []int
		scores []float64
		want   string
	}{
		{"best score within window", LoadGuardConfig{Window: 2}, []int{0, 2, 1}, []float64{0, 9, 3}, "b"},
		{"best score outside window loses", LoadGuardConfig{Window: 2}, []int{0, 3, 1}, []float64{0, 9, 3}, "c"},
		{"edge of window is inside", LoadGuardConfig{Window: 2}, []int{4, 6}, []float64{0, 1}, "b"},
		{"ratio widens window", LoadGuardConfig{Window: 2, Ratio: 0.5}, []int{10, 15, 13}, []float64{1, 9, 3}, "b"},
		{"zero guard is least loaded", LoadGuardConfig{}, []int{1, 0, 2}, []float64{0, 0, 9}, "b"},
		{"zero guard uses score among least loaded", LoadGuardConfig{}, []int{0, 0, 2}, []float64{1, 2, 9}, "b"},
		{"score tie goes to lower load", LoadGuardConfig{Window: 5}, []int{3, 1, 2}, []float64{4, 4, 4}, "b"},
		{"higher score beats lower load", LoadGuardConfig{Window: 5}, []int{0, 4}, []float64{1, 2}, "b"},
		{"single endpoint", LoadGuardConfig{}, []int{7}, []float64{0}, "a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := eps(tt.loads...)
			calls := 0
			i := NewLoadGuard(tt.cfg).Choose(e, 42, func(i int) float64 { calls++; return tt.scores[i] })
			if got := e[i].ID; got != tt.want {
				t.Errorf("Choose = %s, want %s", got, tt.want)
			}
			limit := NewLoadGuard(tt.cfg).Limit(float64(slices.Min(tt.loads)))
			eligible := 0
			for _, l := range tt.loads {
				if float64(l) <= limit {
					eligible++
				}
			}
			if calls != eligible {
				t.Errorf("score called %d times, want %d (once per eligible endpoint)", calls, eligible)
			}
		})
	}
}

func TestLoadGuardChooseWithSlack(t *testing.T) {
	tests := []struct {
		name   string
		loads  []int
		slack  []float64
		scores []float64
		want   string
	}{
		{"slack lets a busier endpoint in", []int{0, 3}, []float64{0, 1}, []float64{0, 9}, "b"},
		{"too little slack keeps it out", []int{0, 4}, []float64{0, 1}, []float64{0, 9}, "a"},
		{"negative slack narrows nothing", []int{0, 2}, []float64{-5, -5}, []float64{0, 9}, "b"},
		{"ties on score still go to the lower real load", []int{1, 2}, []float64{0, 5}, []float64{3, 3}, "a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := eps(tt.loads...)
			i := NewLoadGuard(LoadGuardConfig{Window: 2}).ChooseWithSlack(e, 42,
				func(i int) float64 { return tt.scores[i] }, func(i int) float64 { return tt.slack[i] })
			if got := e[i].ID; got != tt.want {
				t.Errorf("ChooseWithSlack = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestLoadGuardChooseEmpty(t *testing.T) {
	if got := (LoadGuard{}).Choose(nil, 0, func(int) float64 { return 0 }); got != -1 {
		t.Errorf("Choose(nil) = %d, want -1", got)
	}
}

// TestLoadGuardDeterministic: full ties resolve the same way whatever the
// order of the candidates.
func TestLoadGuardDeterministic(t *testing.T) {
	g := NewLoadGuard(LoadGuardConfig{Window: 2})
	rng := rand.New(rand.NewPCG(1, 2))
	for seed := range uint64(50) {
		e := eps(1, 1, 1, 1, 1, 1)
		want := e[g.Choose(e, seed, func(int) float64 { return 3 })].ID
		for range 10 {
			rng.Shuffle(len(e), func(i, j int) { e[i], e[j] = e[j], e[i] })
			if got := e[g.Choose(e, seed, func(int) float64 { return 3 })].ID; got != want {
				t.Fatalf("seed %d: Choose = %s after shuffle, want %s", seed, got, want)
			}
		}
	}
}

// TestLoadGuardSeedsSpread: full ties do not all land on one endpoint when
// the seeds (prompts) differ.
func TestLoadGuardSeedsSpread(t *testing.T) {
	g := NewLoadGuard(LoadGuardConfig{Window: 2})
	e := eps(0, 0, 0, 0)
	counts := map[string]int{}
	const n = 4000
	for seed := range uint64(n) {
		counts[e[g.Choose(e, seed*0x9e3779b97f4a7c15, func(int) float64 { return 0 })].ID]++
	}
	for _, ep := range e {
		if got := counts[ep.ID]; got < n/4*8/10 || got > n/4*12/10 {
			t.Errorf("endpoint %s chosen %d times of %d, want about %d", ep.ID, got, n, n/4)
		}
	}
}
