// Package pool holds the router's live view of its workers: one Endpoint
// per discovered URL with its health, ejection state, in-flight count and
// the load and models last scraped from it. Endpoint state lives apart from
// routing configuration, so a strategy reload never resets load or health
// (the pattern of Caddy's reverse-proxy hosts).
package pool

import (
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/warmpath/warmpath/services/router/internal/discovery"
)

// Stats is what the router last scraped from a worker.
type Stats struct {
	Running, Waiting int
	// InFlightAtScrape is the router's in-flight count at this worker when
	// the scrape answered, so the external share of Running+Waiting can be
	// told apart from the router's own requests.
	InFlightAtScrape int
	// PeerInFlightAtScrape is what the other router replicas last reported
	// in flight at this worker (package peerload) when the scrape
	// answered: their share of Running+Waiting, which they report more
	// often than workers are scraped.
	PeerInFlightAtScrape    int
	KVCacheUsage            float64
	BlockSize, NumGPUBlocks int
	// ProcessStart is the worker's process_start_time_seconds (0 when it
	// exports none): a change means a new process with an empty cache.
	ProcessStart float64
	// PrefixCache is vLLM's GPU prefix cache, in tokens since the worker
	// started (vllm:prefix_cache_hits_total of _queries_total); zero when
	// not exported.
	PrefixCache HitCounters
	// LMCache is what the worker's LMCache exports; nil when none of it.
	LMCache   *LMCacheStats
	ScrapedAt time.Time
}

// HitCounters are a cache's hit and query counters, in tokens.
type HitCounters struct{ Hits, Queries float64 }

// Since is the hits and queries counted between then and c; when a
// counter went back (the worker restarted), those counted since its new
// start.
func (c HitCounters) Since(then HitCounters) HitCounters {
	if c.Hits < then.Hits || c.Queries < then.Queries {
		return c
	}
	return HitCounters{Hits: c.Hits - then.Hits, Queries: c.Queries - then.Queries}
}

// LMCacheStats is what a worker's LMCache exports.
type LMCacheStats struct {
	// Retrieves are the tokens its retrieves found of those asked for
	// (lmcache:num_hit_tokens_total of lmcache:num_requested_tokens_total).
	Retrieves HitCounters
	// LocalUsageBytes is lmcache:local_cache_usage, its local (CPU) cache's
	// size, when HasLocalUsage.
	LocalUsageBytes float64
	HasLocalUsage   bool
}

// Ejection configures passive outlier ejection.
type Ejection struct {
	// ConsecutiveFailures ejects an endpoint after this many failed
	// requests in a row (connect errors, 5xx); 0 disables ejection.
	ConsecutiveFailures int
	// BaseDuration is the first ejection's length; each further ejection
	// without a success in between doubles it, up to MaxDuration.
	BaseDuration, MaxDuration time.Duration
	// MaxEjectedPercent bounds the share of a model's workers ejected at
	// once; one may always be, as in Envoy (max_ejection_percent). A
	// request that trips every worker cannot take the whole fleet out.
	// 0 means no bound.
	MaxEjectedPercent int
}

// Endpoint is one worker. Its methods are safe for concurrent use; an
// Endpoint must not be copied.
type Endpoint struct {
	URL  string
	Name string

	inflight atomic.Int64
	// prefill is the prompt tokens of the router's requests here that
	// have not begun answering (strategy.Endpoint.PendingPrefill).
	prefill atomic.Int64
	// healthy is the active health check's verdict; a new endpoint starts
	// unhealthy until its first check passes.
	healthy atomic.Bool
	stats   atomic.Pointer[Stats]
	// peerInflight is the other router replicas' requests in flight here.
	peerInflight atomic.Int64
	models       atomic.Pointer[[]string]

	modelsMu sync.Mutex // guards modelsSet
	// modelsSet is closed, and dropped, by the next SetModels: those
	// waiting for the models (ModelsChanged) wake then rather than poll.
	modelsSet chan struct{}

	mu           sync.Mutex // guards the ejection fields
	failures     int
	ejectedUntil time.Time
	ejections    int // consecutive ejections, for backoff
	totalEjected uint64
}

// NewEndpoint returns an endpoint in its initial, unhealthy state.
func NewEndpoint(url, name string) *Endpoint {
	return &Endpoint{URL: url, Name: name}
}

// InFlight returns the router's requests currently at this endpoint.
func (e *Endpoint) InFlight() int { return int(e.inflight.Load()) }

// PendingPrefill returns the prompt tokens the router sent this endpoint
// that it has not begun answering.
func (e *Endpoint) PendingPrefill() int { return int(e.prefill.Load()) }

// StartPrefill counts tokens as pending prefill; call the returned func
// (once is enough, more is harmless) when the first response byte arrives
// or the attempt ends.
func (e *Endpoint) StartPrefill(tokens int) (done func()) {
	if tokens <= 0 {
		return func() {}
	}
	e.prefill.Add(int64(tokens))
	var once sync.Once
	return func() { once.Do(func() { e.prefill.Add(-int64(tokens)) }) }
}

// Acquire counts a request in flight; call the returned func when it ends.
func (e *Endpoint) Acquire() (release func()) {
	e.inflight.Add(1)
	return e.releaser()
}

// TryAcquire counts a request in flight unless limit (> 0) are already;
// checking and counting are one atomic step, so concurrent callers never
// exceed the limit. limit <= 0 means no limit.
func (e *Endpoint) TryAcquire(limit int) (release func(), ok bool) {
	if limit <= 0 {
		return e.Acquire(), true
	}
	for {
		n := e.inflight.Load()
		if n >= int64(limit) {
			return nil, false
		}
		if e.inflight.CompareAndSwap(n, n+1) {
			return e.releaser(), true
		}
	}
}

func (e *Endpoint) releaser() func() {
	var once sync.Once
	return func() { once.Do(func() { e.inflight.Add(-1) }) }
}

// SetHealthy records an active health-check verdict. A passing check also
// ends an ejection whose time is up (the endpoint is probed back in).
func (e *Endpoint) SetHealthy(ok bool, now time.Time) {
	e.healthy.Store(ok)
	if ok {
		e.mu.Lock()
		if !e.ejectedUntil.IsZero() && !now.Before(e.ejectedUntil) {
			e.ejectedUntil = time.Time{}
		}
		e.mu.Unlock()
	}
}

// Healthy reports the last active health-check verdict.
func (e *Endpoint) Healthy() bool { return e.healthy.Load() }

// Ejected reports whether passive ejection currently excludes the endpoint.
func (e *Endpoint) Ejected() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return !e.ejectedUntil.IsZero()
}

// EjectedUntil returns when the current ejection ends (zero if none).
func (e *Endpoint) EjectedUntil() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.ejectedUntil
}

// Available reports whether requests may be sent: healthy and not ejected.
func (e *Endpoint) Available() bool { return e.Healthy() && !e.Ejected() }

// RecordSuccess resets the failure streak and the ejection backoff.
func (e *Endpoint) RecordSuccess() {
	e.mu.Lock()
	e.failures = 0
	e.ejections = 0
	e.mu.Unlock()
}

// RecordFailure counts a failed request and reports whether it ejected the
// endpoint. An ejected endpoint returns only after its ejection time has
// passed and an active health check succeeds. It ejects regardless of
// how many others are out: Pool.RecordFailure applies the bound.
func (e *Endpoint) RecordFailure(cfg Ejection, now time.Time) bool {
	return e.recordFailure(cfg, now, func() bool { return true })
}

// recordFailure is RecordFailure asking allowed before it ejects. A
// failure that would eject but is not allowed keeps the streak, so the
// next failure tries again once others have come back.
func (e *Endpoint) recordFailure(cfg Ejection, now time.Time, allowed func() bool) bool {
	if cfg.ConsecutiveFailures <= 0 {
		return false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.failures++
	if e.failures < cfg.ConsecutiveFailures || !e.ejectedUntil.IsZero() || !allowed() {
		return false
	}
	d := cfg.BaseDuration << min(e.ejections, 16)
	if cfg.MaxDuration > 0 && (d > cfg.MaxDuration || d <= 0) {
		d = cfg.MaxDuration
	}
	e.ejectedUntil = now.Add(d)
	e.ejections++
	e.failures = 0
	e.totalEjected++
	return true
}

// TotalEjections counts ejections since the endpoint appeared.
func (e *Endpoint) TotalEjections() uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.totalEjected
}

// Unexplained returns the load at the worker, as of the last scrape, that
// neither this router nor its peers (as they then reported) had sent:
// other clients, requests in transit. Only a scrape sees it.
func (s Stats) Unexplained() int {
	return max(0, s.Running+s.Waiting-s.InFlightAtScrape-s.PeerInFlightAtScrape)
}

// External returns the load at the worker that this router did not send:
// the other replicas' requests as they last reported them (a poll
// interval old, package peerload), plus what the last scrape found beyond
// all the replicas' requests. Without peers that is the scrape's view
// alone, as stale as the scrape interval.
func (e *Endpoint) External() int {
	return e.PeerInFlight() + e.Stats().Unexplained()
}

// SetPeerInFlight records the other router replicas' requests in flight
// at this worker, as they last reported them.
func (e *Endpoint) SetPeerInFlight(n int) { e.peerInflight.Store(int64(n)) }

// PeerInFlight returns the other replicas' requests in flight at this
// worker, as they last reported them (0 without peers).
func (e *Endpoint) PeerInFlight() int { return int(e.peerInflight.Load()) }

// SetStats records scraped load.
func (e *Endpoint) SetStats(s Stats) { e.stats.Store(&s) }

// Stats returns the last scraped load (zero before the first scrape).
func (e *Endpoint) Stats() Stats {
	if s := e.stats.Load(); s != nil {
		return *s
	}
	return Stats{}
}

// SetModels records the models the worker serves (from /v1/models).
func (e *Endpoint) SetModels(models []string) {
	m := slices.Clone(models)
	sort.Strings(m)
	e.models.Store(&m)
	e.modelsMu.Lock()
	if e.modelsSet != nil {
		close(e.modelsSet)
		e.modelsSet = nil
	}
	e.modelsMu.Unlock()
}

// ModelsChanged returns a channel closed by the next SetModels. Take it
// before reading Models, so a change in between is not missed.
func (e *Endpoint) ModelsChanged() <-chan struct{} {
	e.modelsMu.Lock()
	defer e.modelsMu.Unlock()
	if e.modelsSet == nil {
		e.modelsSet = make(chan struct{})
	}
	return e.modelsSet
}

// Models returns the served models; nil before the first successful fetch.
func (e *Endpoint) Models() []string {
	if m := e.models.Load(); m != nil {
		return *m
	}
	return nil
}

// Serves reports whether the worker serves model.
func (e *Endpoint) Serves(model string) bool {
	_, ok := slices.BinarySearch(e.Models(), model)
	return ok
}

// Pool is the set of endpoints, keyed by URL. It is safe for concurrent use.
type Pool struct {
	// ejectMu makes counting the ejected endpoints and ejecting one a
	// single step, so concurrent failures cannot pass the bound together.
	ejectMu sync.Mutex

	mu   sync.RWMutex
	eps  map[string]*Endpoint
	list []*Endpoint // sorted by URL; replaced, never mutated

	// OnAdd and OnRemove, when set before the first Update, are called
	// (outside the lock) for endpoints entering and leaving the pool.
	OnAdd    func(*Endpoint)
	OnRemove func(*Endpoint)
}

// New returns an empty pool.
func New() *Pool { return &Pool{eps: make(map[string]*Endpoint)} }

// Update makes the pool's set equal targets: new URLs are added (initially
// unhealthy), missing ones removed at once, existing ones keep their state.
func (p *Pool) Update(targets []discovery.Target) {
	want := make(map[string]discovery.Target, len(targets))
	for _, t := range targets {
		want[t.URL] = t
	}
	var added, removed []*Endpoint
	p.mu.Lock()
	for url, ep := range p.eps {
		if _, ok := want[url]; !ok {
			delete(p.eps, url)
			removed = append(removed, ep)
		}
	}
	for url, t := range want {
		if _, ok := p.eps[url]; !ok {
			ep := NewEndpoint(url, t.Name)
			p.eps[url] = ep
			added = append(added, ep)
		}
	}
	list := make([]*Endpoint, 0, len(p.eps))
	for _, ep := range p.eps {
		list = append(list, ep)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].URL < list[j].URL })
	p.list = list
	p.mu.Unlock()
	for _, ep := range removed {
		if p.OnRemove != nil {
			p.OnRemove(ep)
		}
	}
	for _, ep := range added {
		if p.OnAdd != nil {
			p.OnAdd(ep)
		}
	}
}

// All returns every endpoint, sorted by URL. The slice must not be modified.
func (p *Pool) All() []*Endpoint {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.list
}

// Get returns the endpoint with url, or nil.
func (p *Pool) Get(url string) *Endpoint {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.eps[url]
}

// RecordFailure counts a failed request at ep and reports whether it
// ejected ep. Ejection is refused while it would take more than
// cfg.MaxEjectedPercent of the workers of any model ep serves out at once
// (at least one may always be out).
func (p *Pool) RecordFailure(ep *Endpoint, cfg Ejection, now time.Time) bool {
	if cfg.MaxEjectedPercent <= 0 {
		return ep.RecordFailure(cfg, now)
	}
	p.ejectMu.Lock()
	defer p.ejectMu.Unlock()
	return ep.recordFailure(cfg, now, func() bool { return p.mayEject(ep, cfg.MaxEjectedPercent) })
}

// mayEject reports whether ejecting ep keeps every model it serves within
// maxPercent of its workers ejected. A worker whose models are unknown is
// counted against the whole pool.
func (p *Pool) mayEject(ep *Endpoint, maxPercent int) bool {
	all := p.All()
	models := ep.Models()
	share := func(serves func(*Endpoint) bool) bool {
		n, out := 0, 1 // ep itself, about to go out
		for _, o := range all {
			if !serves(o) {
				continue
			}
			n++
			if o != ep && o.Ejected() {
				out++
			}
		}
		return out <= max(1, n*maxPercent/100)
	}
	if len(models) == 0 {
		return share(func(*Endpoint) bool { return true })
	}
	for _, m := range models {
		if !share(func(o *Endpoint) bool { return o == ep || o.Serves(m) }) {
			return false
		}
	}
	return true
}
