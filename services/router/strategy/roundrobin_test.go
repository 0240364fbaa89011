package strategy

import (
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
)

func TestRoundRobinPick(t *testing.T) {
	tests := []struct {
		name string
		sets [][]string // candidate IDs for each successive pick
		want string     // chosen IDs, concatenated
	}{
		{"cycles in ID order", [][]string{{"a", "b", "c"}, {"a", "b", "c"}, {"a", "b", "c"}, {"a", "b", "c"}}, "abca"},
		{"slice order is irrelevant", [][]string{{"c", "a", "b"}, {"b", "c", "a"}, {"a", "c", "b"}, {"b", "a", "c"}}, "abca"},
		{"a removed endpoint is skipped without repeats", [][]string{{"a", "b", "c", "d"}, {"a", "c", "d"}, {"a", "c", "d"}, {"a", "c", "d"}}, "acda"},
		{"a new endpoint joins the rotation in place", [][]string{{"a", "c"}, {"a", "b", "c"}, {"a", "b", "c"}, {"a", "b", "c"}}, "abca"},
		{"a retry excludes the tried endpoint", [][]string{{"a", "b", "c"}, {"a", "c"}, {"a", "b", "c"}}, "aca"},
		{"single endpoint", [][]string{{"a"}, {"a"}}, "aa"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rr := NewRoundRobin()
			var got strings.Builder
			for _, set := range tt.sets {
				e := make([]Endpoint, len(set))
				for i, id := range set {
					e[i] = Endpoint{ID: id}
				}
				d, err := rr.Pick(&Request{}, e)
				if err != nil {
					t.Fatal(err)
				}
				if d.Strategy != NameRoundRobin {
					t.Errorf("Strategy = %q, want %q", d.Strategy, NameRoundRobin)
				}
				got.WriteString(d.Endpoint)
			}
			if got.String() != tt.want {
				t.Errorf("picks = %s, want %s", got.String(), tt.want)
			}
		})
	}
}

func TestRoundRobinEmpty(t *testing.T) {
	if _, err := NewRoundRobin().Pick(&Request{}, nil); !errors.Is(err, ErrNoEndpoint) {
		t.Errorf("Pick(nil) error = %v, want ErrNoEndpoint", err)
	}
}

// TestRoundRobinParallelFair: concurrent Picks over shuffled slices still
// give every endpoint exactly its share.
func TestRoundRobinParallelFair(t *testing.T) {
	rr := NewRoundRobin()
	const workers, picks = 8, 500
	var mu sync.Mutex
	counts := map[string]int{}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 0))
			local := map[string]int{}
			for range picks {
				e := eps(0, 0, 0, 0)
				rng.Shuffle(len(e), func(i, j int) { e[i], e[j] = e[j], e[i] })
				d, err := rr.Pick(nil, e)
				if err != nil {
					t.Error(err)
					return
				}
				local[d.Endpoint]++
			}
			mu.Lock()
			for k, v := range local {
				counts[k] += v
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	for _, id := range []string{"a", "b", "c", "d"} {
		if got, want := counts[id], workers*picks/4; got != want {
			t.Errorf("endpoint %s picked %d times, want %d", id, got, want)
		}
	}
}
