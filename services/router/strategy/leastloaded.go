package strategy

// NameLeastLoaded labels decisions made by LeastLoaded.
const NameLeastLoaded = "leastloaded"

// LeastLoaded picks the endpoint with the lowest Load, the first of equals
// (eps come sorted by ID, so ties break the same way every time). It is
// how requests that teach a cache nothing (tokenize, detokenize) are placed.
// eps must not be empty.
func LeastLoaded(eps []Endpoint) Decision {
	best := eps[0]
	for _, e := range eps[1:] {
		if e.Load() < best.Load() {
			best = e
		}
	}
	return Decision{Endpoint: best.ID, Strategy: NameLeastLoaded}
}
