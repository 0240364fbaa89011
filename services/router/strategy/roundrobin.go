package strategy

import "sync"

// RoundRobin hands requests to the candidates in turn, in ID order. It
// keeps a cursor (the last ID chosen) rather than a counter modulo
// len(eps): the next pick is the smallest ID after the cursor, wrapping
// around. So the rotation is fair whatever order the caller lists the
// endpoints in, and a changing set (a worker joins, leaves, is full, or was
// already tried by a retry) neither skips nor repeats the others, which a
// counter taken modulo a changing length would do.
//
// Callers pass only healthy workers serving the model with spare capacity;
// RoundRobin ignores load. The zero value is ready to use and safe for
// concurrent use; it must not be copied after first use.
type RoundRobin struct {
	mu   sync.Mutex
	last string // guarded by mu; ID of the previous pick, "" before the first
}

var _ Strategy = (*RoundRobin)(nil)

// NewRoundRobin returns a round-robin strategy.
func NewRoundRobin() *RoundRobin {
	return &RoundRobin{}
}

// Name returns "roundrobin".
func (*RoundRobin) Name() string { return NameRoundRobin }

// Pick returns the endpoint whose ID follows the previous pick's in
// lexical order, wrapping to the smallest ID; ErrNoEndpoint when eps is
// empty. req is not read. It costs O(len(eps)) and does not allocate.
func (r *RoundRobin) Pick(_ *Request, eps []Endpoint) (Decision, error) {
	if len(eps) == 0 {
		return Decision{}, ErrNoEndpoint
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	first, next := -1, -1
	for i := range eps {
		id := eps[i].ID
		if first < 0 || id < eps[first].ID {
			first = i
		}
		if id > r.last && (next < 0 || id < eps[next].ID) {
			next = i
		}
	}
	if next < 0 {
		next = first
	}
	r.last = eps[next].ID
	return Decision{Endpoint: r.last, Strategy: NameRoundRobin}, nil
}
