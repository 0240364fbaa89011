package strategy

import (
	"sync"
	"time"

	"github.com/warmpath/warmpath/services/router/kvindex"
)

// Predictions are the blocks kvaware expects workers to be computing: a
// routed request's blocks count as cached on its worker until the
// worker's own events confirm them, or their time runs out, so siblings
// arriving meanwhile land together. They are live state, like the pool's:
// the router owns one set and hands it to every kvaware it builds, so a
// configuration reload keeps what is in flight. Safe for concurrent use.
type Predictions struct {
	mu    sync.Mutex
	byKey map[uint64][]prediction // block key -> workers expected to hold it
	max   int                     // block keys kept; see KVAwareConfig.MaxPredictions
}

type prediction struct {
	worker string
	until  time.Time
}

// NewPredictions returns an empty set bounded by the default
// maxPredictions until a kvaware configures it.
func NewPredictions() *Predictions {
	return &Predictions{byKey: map[uint64][]prediction{}, max: KVAwareConfig{}.withDefaults().MaxPredictions}
}

// Confirmer is told which blocks a worker's own events reported stored.
type Confirmer interface {
	Confirm(worker string, keys []uint64)
}

// setMax bounds the block keys kept (a configuration's MaxPredictions).
func (p *Predictions) setMax(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.max = n
}

// leading is the run of leading keys predicted on worker at now.
func (p *Predictions) leading(keys []uint64, worker string, now time.Time) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, key := range keys {
		found := false
		for _, pr := range p.byKey[key] {
			if pr.worker == worker && now.Before(pr.until) {
				found = true
				break
			}
		}
		if !found {
			break
		}
		n++
	}
	return n
}

// add records that worker is computing keys, until until. When the set is
// full of live predictions, this one is skipped.
func (p *Predictions) add(keys []uint64, worker string, now, until time.Time) {
	if len(keys) == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.byKey)+len(keys) > p.max {
		for key := range p.byKey {
			p.keep(key, func(pr prediction) bool { return now.Before(pr.until) })
		}
		if len(p.byKey)+len(keys) > p.max {
			return
		}
	}
	// The worker string is the pool's own (not the request's buffer).
	for _, key := range keys {
		ps := p.byKey[key]
		replaced := false
		for i := range ps {
			if ps[i].worker == worker {
				ps[i].until, replaced = until, true
				break
			}
		}
		if !replaced {
			ps = append(ps, prediction{worker: worker, until: until})
		}
		p.byKey[key] = ps
	}
}

// Confirm implements Confirmer: worker's events reported keys stored, so
// from then on the index is the truth, including any later eviction a
// lingering prediction would hide.
func (p *Predictions) Confirm(worker string, keys []uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, key := range keys {
		p.keep(key, func(pr prediction) bool { return pr.worker != worker })
	}
}

// Forget drops every prediction on worker (it left the pool).
func (p *Predictions) Forget(worker string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for key := range p.byKey {
		p.keep(key, func(pr prediction) bool { return pr.worker != worker })
	}
}

// Len is the number of block keys predicted somewhere.
func (p *Predictions) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.byKey)
}

// keep keeps key's predictions that keep accepts, dropping the key when
// none is left; p.mu held. (Deleting the current key while ranging over
// the map is allowed.)
func (p *Predictions) keep(key uint64, keep func(prediction) bool) {
	ps, ok := p.byKey[key]
	if !ok {
		return
	}
	live := ps[:0]
	for _, pr := range ps {
		if keep(pr) {
			live = append(live, pr)
		}
	}
	if len(live) == 0 {
		delete(p.byKey, key)
	} else {
		p.byKey[key] = live
	}
}

// ConfirmingSink commits a worker's index changes to Sink, then tells
// Confirmer which blocks they added: the router's KV subscriber feeds the
// index through one, so its events end kvaware's predictions.
type ConfirmingSink struct {
	kvindex.Sink
	Confirmer Confirmer
}

// Commit implements kvindex.Sink.
func (c ConfirmingSink) Commit(ch *kvindex.Change) error {
	err := c.Sink.Commit(ch)
	for _, op := range ch.Ops {
		if op.Kind == kvindex.OpAdd {
			c.Confirmer.Confirm(ch.Worker, op.Keys)
		}
	}
	return err
}
