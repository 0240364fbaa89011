// Package limiter bounds the router's concurrency: at most MaxConcurrent
// requests proceed, up to MaxQueue more wait in FIFO order, and the rest are
// turned away at once with the configured overflow status (the managed
// anchor's requestLimits: maxConcurrentRequests, maxQueueSize,
// overflowStatusCode). Waiting is bounded in time too.
package limiter

import (
	"container/list"
	"context"
	"errors"
	"sync"
	"time"
)

// Config is hot-reloadable.
type Config struct {
	// MaxConcurrent requests in progress; 0 means unlimited.
	MaxConcurrent int `json:"maxConcurrentRequests"`
	// MaxQueue requests waiting for a slot; beyond it, overflow.
	MaxQueue int `json:"maxQueueSize"`
	// OverflowStatus is the HTTP status for overflow (429 or 503).
	OverflowStatus int `json:"overflowStatusCode"`
	// QueueTimeout bounds one request's wait; 0 means 30s.
	QueueTimeout time.Duration `json:"queueTimeout"`
}

// Errors returned by Acquire.
var (
	ErrOverflow     = errors.New("limiter: over capacity")
	ErrQueueTimeout = errors.New("limiter: timed out waiting for capacity")
)

// Limiter is safe for concurrent use.
type Limiter struct {
	mu     sync.Mutex
	cfg    Config
	active int
	queue  *list.List // of chan struct{}
	// changed is closed and replaced whenever a slot frees, waking
	// WaitForChange callers (used when every worker is at its own limit).
	changed chan struct{}
}

// New returns a limiter.
func New(cfg Config) *Limiter {
	l := &Limiter{queue: list.New(), changed: make(chan struct{})}
	l.SetConfig(cfg)
	return l
}

// SetConfig replaces the limits; waiting requests keep their places and
// newly allowed capacity is handed to them.
func (l *Limiter) SetConfig(cfg Config) {
	if cfg.QueueTimeout <= 0 {
		cfg.QueueTimeout = 30 * time.Second
	}
	if cfg.OverflowStatus == 0 {
		cfg.OverflowStatus = 429
	}
	l.mu.Lock()
	l.cfg = cfg
	l.handOff()
	l.mu.Unlock()
}

// Config returns the limits in force.
func (l *Limiter) Config() Config {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cfg
}

// Stats returns requests in progress and waiting.
func (l *Limiter) Stats() (active, queued int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.active, l.queue.Len()
}

func (l *Limiter) hasRoom() bool { return l.cfg.MaxConcurrent <= 0 || l.active < l.cfg.MaxConcurrent }

// Acquire takes a slot, waiting in the queue if needed. The returned
// release must be called exactly once when the request ends.
func (l *Limiter) Acquire(ctx context.Context) (release func(), err error) {
	l.mu.Lock()
	if l.hasRoom() && l.queue.Len() == 0 {
		l.active++
		l.mu.Unlock()
		return l.releaser(), nil
	}
	if l.queue.Len() >= l.cfg.MaxQueue {
		l.mu.Unlock()
		return nil, ErrOverflow
	}
	ready := make(chan struct{})
	elem := l.queue.PushBack(ready)
	timeout := l.cfg.QueueTimeout
	l.mu.Unlock()

	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-ready:
		return l.releaser(), nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-timer.C:
		err = ErrQueueTimeout
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	select {
	case <-ready:
		// Handed a slot while giving up: pass it on.
		l.active--
		l.handOff()
	default:
		l.queue.Remove(elem)
	}
	return nil, err
}

func (l *Limiter) releaser() func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			l.active--
			l.handOff()
			l.notify()
			l.mu.Unlock()
		})
	}
}

// handOff gives free slots to waiters in FIFO order; holds l.mu.
func (l *Limiter) handOff() {
	for l.queue.Len() > 0 && l.hasRoom() {
		ready := l.queue.Remove(l.queue.Front()).(chan struct{})
		l.active++
		close(ready)
	}
}

// Notify wakes WaitForChange callers; call it when capacity elsewhere (a
// worker's own limit) frees.
func (l *Limiter) Notify() {
	l.mu.Lock()
	l.notify()
	l.mu.Unlock()
}

func (l *Limiter) notify() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// Changed returns a channel closed at the next Notify. Take it before
// looking for capacity, then WaitForChange on it: a release in between is
// not missed.
func (l *Limiter) Changed() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.changed
}

// WaitForChange blocks until ch (from Changed) closes, ctx ends, or the
// queue timeout passes. It is how a request waits when every worker it
// could use is at its per-worker limit.
func (l *Limiter) WaitForChange(ctx context.Context, ch <-chan struct{}) error {
	l.mu.Lock()
	timeout := l.cfg.QueueTimeout
	l.mu.Unlock()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return ErrQueueTimeout
	}
}
