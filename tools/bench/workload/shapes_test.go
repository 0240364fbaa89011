package workload_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/warmpath/warmpath/tools/bench/workload"
)

// shape is a generated shape at test size, with what its requests must
// look like.
type shape struct {
	name string
	gen  func(seed uint64) generator
	// count is the number of requests, or a range when min < max.
	minReqs, maxReqs int
	// minPrompt and maxPrompt bound every prompt's tokens.
	minPrompt, maxPrompt int
	output               int
	// chained: rounds wait for their previous round (After ≥ 0), so
	// arrivals need not be in order; otherwise they must be.
	chained bool
}

// testShapes are the shapes small enough for unit tests and a des run.
func testShapes() []shape {
	return []shape{
		{name: "many-short-chats", gen: func(s uint64) generator {
			return workload.ManyShortChats{Users: 12, Groups: 3, System: 64, MinRounds: 3, MaxRounds: 5, Question: 8,
				Answer: 16, QPS: 4, Think: time.Second, Seed: s}
		}, minReqs: 36, maxReqs: 60, minPrompt: 64 + 8, maxPrompt: 64 + 5*8 + 4*16, output: 16, chained: true},
		{name: "few-long-docs", gen: func(s uint64) generator {
			return workload.FewLongDocs{Docs: 3, MinTokens: 512, MaxTokens: 1024, Questions: 4, Question: 16, Output: 8,
				Rate: 5, Seed: s}
		}, minReqs: 12, maxReqs: 12, minPrompt: 512 + 16, maxPrompt: 1024 + 16, output: 8},
		{name: "bursty-fanout", gen: func(s uint64) generator {
			return workload.BurstyFanout{Contexts: 2, MinContext: 256, MaxContext: 512, Bursts: 5, MinFanout: 4,
				MaxFanout: 8, Suffix: 16, Output: 8, Growth: 32, Lifetime: 2, BurstRate: 1, Spread: 100 * time.Millisecond, Seed: s}
		}, minReqs: 20, maxReqs: 40, minPrompt: 256 + 16, maxPrompt: 512 + 32 + 16, output: 8},
		{name: "skewed-popularity", gen: func(s uint64) generator {
			return workload.SkewedPopularity{Prefixes: 40, MinPrefix: 128, MaxPrefix: 512, Requests: 60, Question: 16,
				Output: 8, S: 1.1, Rate: 10, Seed: s}
		}, minReqs: 60, maxReqs: 60, minPrompt: 128 + 16, maxPrompt: 512 + 16, output: 8},
	}
}

func TestShapesAreWellFormed(t *testing.T) {
	w := words(t)
	for _, tt := range testShapes() {
		t.Run(tt.name, func(t *testing.T) {
			reqs, err := tt.gen(7).Generate(w)
			if err != nil {
				t.Fatal(err)
			}
			if len(reqs) < tt.minReqs || len(reqs) > tt.maxReqs {
				t.Fatalf("%d requests, want %d-%d", len(reqs), tt.minReqs, tt.maxReqs)
			}
			for i, r := range reqs {
				if n := r.PromptTokens(); n < tt.minPrompt || n > tt.maxPrompt {
					t.Errorf("request %d: %d prompt tokens, want %d-%d", i, n, tt.minPrompt, tt.maxPrompt)
				}
				if r.MaxTokens != tt.output || r.Session == "" || r.Arrival < 0 {
					t.Errorf("request %d: max tokens %d, session %q, arrival %v", i, r.MaxTokens, r.Session, r.Arrival)
				}
				if r.Chat && len(r.Roles) != len(r.Parts) {
					t.Errorf("request %d: %d roles for %d parts", i, len(r.Roles), len(r.Parts))
				}
				switch {
				case r.After >= 0 && !tt.chained:
					t.Errorf("request %d waits for %d in an unchained shape", i, r.After)
				case r.After >= i:
					t.Errorf("request %d waits for a later request %d", i, r.After)
				case r.After >= 0:
					// A round extends its previous round's prompt, in the same session.
					prev := reqs[r.After]
					if prev.Session != r.Session || len(prev.Parts) >= len(r.Parts) ||
						!reflect.DeepEqual(prev.Parts, r.Parts[:len(prev.Parts)]) {
						t.Errorf("request %d does not continue request %d", i, r.After)
					}
				case !tt.chained && i > 0 && r.Arrival < reqs[i-1].Arrival:
					t.Errorf("arrival %d (%v) before %d's (%v)", i, r.Arrival, i-1, reqs[i-1].Arrival)
				}
			}
		})
	}
}

func TestShapesRejectBadKnobs(t *testing.T) {
	w := words(t)
	for _, g := range []generator{
		workload.ManyShortChats{Users: 1, Groups: 1, MinRounds: 3, MaxRounds: 2, Question: 1, Answer: 1},
		workload.FewLongDocs{Docs: 1, MinTokens: 10, MaxTokens: 5, Questions: 1, Question: 1, Output: 1},
		workload.BurstyFanout{Contexts: 1, MinContext: 1, MaxContext: 1, Bursts: 1, MinFanout: 1, MaxFanout: 1, Suffix: 1, Output: 1},
		workload.SkewedPopularity{Prefixes: 1, MinPrefix: 1, MaxPrefix: 1, Requests: 1, Question: 1, Output: 1, S: 1},
	} {
		if _, err := g.Generate(w); err == nil {
			t.Errorf("%T%+v: no error", g, g)
		}
	}
}

func TestSkewedPopularityIsSkewed(t *testing.T) {
	reqs, err := workload.DefaultSkewedPopularity().Generate(words(t))
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	for _, r := range reqs {
		counts[r.Session]++
	}
	top, once := 0, 0
	for _, n := range counts {
		top = max(top, n)
		if n == 1 {
			once++
		}
	}
	t.Logf("%d requests: %d prefixes used, the hottest %d times, %d once", len(reqs), len(counts), top, once)
	// At s = 1.1 over 1000 prefixes the hottest takes ~18%; uniform would
	// give each 0.1%. The long tail: many prefixes are asked only once.
	if top < len(reqs)/10 || once < 100 {
		t.Errorf("hottest prefix %d of %d requests, %d asked once: not Zipf-skewed", top, len(reqs), once)
	}
}
