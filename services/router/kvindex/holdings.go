package kvindex

// Holding is one worker's copies of one block key in one tier.
type Holding struct {
	Key    uint64
	Tier   Tier
	Copies int
}

// Holdings returns what worker holds, one entry per key and tier. It scans
// the index under the read lock, so it is for rare events: a shared index
// (kvredis) rewrites a worker from it after Redis lost some of its batches.
func (x *Index) Holdings(worker string) []Holding {
	x.mu.RLock()
	defer x.mu.RUnlock()
	w, ok := x.workers[worker]
	if !ok {
		return nil
	}
	c := x.counts[w]
	out := make([]Holding, 0, c[GPU]+c[CPU]+c[L2])
	for s := x.entries[0].next; s != 0; s = x.entries[s].next {
		e := &x.entries[s]
		for i := range e.len() {
			if h := e.at(i); h.worker == w {
				out = append(out, Holding{Key: e.key, Tier: h.tier, Copies: int(h.refs)})
			}
		}
	}
	return out
}
