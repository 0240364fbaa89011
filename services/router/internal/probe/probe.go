// Package probe watches each worker actively: it checks GET /health, reads
// the served models from GET /v1/models and scrapes GET /metrics for load
// (vllm:num_requests_running, vllm:num_requests_waiting,
// vllm:kv_cache_usage_perc), cache geometry (vllm:cache_config_info),
// process start time and cache hit counters (vLLM's prefix cache,
// LMCache's retrieves and local usage), writing the results into the
// endpoint's live state, telling its Observer when a worker restarted and,
// every Config.StatusInterval, logging each healthy worker's cache status.
package probe

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"runtime/debug"
	"slices"
	"strconv"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/warmpath/warmpath/services/router/internal/pool"
)

// Config sets the probing cadence. Zero fields take the defaults.
type Config struct {
	HealthInterval time.Duration // 2s
	ScrapeInterval time.Duration // 1s
	ModelsInterval time.Duration // 30s (and at every health check while unknown)
	Timeout        time.Duration // per probe, 2s
	// MaxBody bounds what is read from a probe response (4 MiB).
	MaxBody int64
	// StatusInterval is how often a healthy worker's scraped cache state
	// is logged ("worker cache status"); 0: never.
	StatusInterval time.Duration
}

func (c *Config) defaults() {
	if c.HealthInterval <= 0 {
		c.HealthInterval = 2 * time.Second
	}
	if c.ScrapeInterval <= 0 {
		c.ScrapeInterval = time.Second
	}
	if c.ModelsInterval <= 0 {
		c.ModelsInterval = 30 * time.Second
	}
	if c.Timeout <= 0 {
		c.Timeout = 2 * time.Second
	}
	if c.MaxBody <= 0 {
		c.MaxBody = 4 << 20
	}
}

// Observer is told about health transitions (metrics, logs) and about
// workers that restarted.
type Observer interface {
	HealthChanged(ep *pool.Endpoint, healthy bool)
	// Restarted is called when the worker's process is new, or may be:
	// its health went down and came back, or its process start time
	// changed. Whatever the router believes the worker caches is gone.
	Restarted(ep *pool.Endpoint, reason string)
}

// Restart reasons passed to Observer.Restarted.
const (
	RestartHealthReturned = "health_returned"
	RestartProcessStart   = "process_start_changed"
)

// Prober runs one probing goroutine per endpoint.
type Prober struct {
	cfg    Config
	client *http.Client
	log    *slog.Logger
	obs    Observer

	mu      sync.Mutex
	cancels map[*pool.Endpoint]context.CancelFunc
	ctx     context.Context
	wg      sync.WaitGroup
}

// New returns a prober whose goroutines live until ctx ends or Stop.
func New(ctx context.Context, cfg Config, client *http.Client, obs Observer, log *slog.Logger) *Prober {
	cfg.defaults()
	if client == nil {
		client = &http.Client{}
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Prober{cfg: cfg, client: client, log: log, obs: obs, cancels: make(map[*pool.Endpoint]context.CancelFunc), ctx: ctx}
}

// Start begins probing ep (idempotent).
func (p *Prober) Start(ep *pool.Endpoint) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.cancels[ep]; ok {
		return
	}
	ctx, cancel := context.WithCancel(p.ctx)
	p.cancels[ep] = cancel
	p.wg.Add(1)
	go p.loop(ctx, ep)
}

// Stop ends probing of ep.
func (p *Prober) Stop(ep *pool.Endpoint) {
	p.mu.Lock()
	cancel, ok := p.cancels[ep]
	delete(p.cancels, ep)
	p.mu.Unlock()
	if ok {
		cancel()
	}
}

// Wait blocks until every probing goroutine has ended.
func (p *Prober) Wait() { p.wg.Wait() }

func (p *Prober) loop(ctx context.Context, ep *pool.Endpoint) {
	defer p.wg.Done()
	defer func() {
		if r := recover(); r != nil {
			p.log.Error("probe loop panicked", "endpoint", ep.URL, "panic", r, "stack", string(debug.Stack()))
		}
	}()
	health := time.NewTicker(p.cfg.HealthInterval)
	defer health.Stop()
	scrape := time.NewTicker(p.cfg.ScrapeInterval)
	defer scrape.Stop()
	var lastModels time.Time
	// wasUp says a check passed before: a later recovery from a failed
	// check is then a worker that may have restarted.
	wasUp := false
	var started float64 // process_start_time_seconds last scraped
	// since is the scrape the last status line reported up to: the next
	// one's hit rates are over the time after it.
	var since pool.Stats
	var status <-chan time.Time
	if p.cfg.StatusInterval > 0 {
		t := time.NewTicker(p.cfg.StatusInterval)
		defer t.Stop()
		status = t.C
	}
	check := func() {
		was := ep.Healthy()
		ok := p.checkHealth(ctx, ep)
		if ok && !was && wasUp {
			p.restarted(ep, RestartHealthReturned)
		}
		wasUp = wasUp || ok
		if ok && (ep.Models() == nil || time.Since(lastModels) >= p.cfg.ModelsInterval) {
			if err := p.fetchModels(ctx, ep); err != nil {
				p.log.Warn("fetch models", "endpoint", ep.URL, "err", err)
			} else {
				lastModels = time.Now()
			}
		}
	}
	scrapeNow := func() {
		st, ok := p.scrape(ctx, ep)
		if ok && since.ScrapedAt.IsZero() {
			since = st
		}
		if !ok || st.ProcessStart == 0 {
			return
		}
		if started != 0 && st.ProcessStart != started {
			p.restarted(ep, RestartProcessStart)
		}
		started = st.ProcessStart
	}
	check()
	scrapeNow()
	for {
		select {
		case <-ctx.Done():
			return
		case <-health.C:
			check()
		case <-scrape.C:
			scrapeNow()
		case <-status:
			since = p.logStatus(ctx, ep, since)
		}
	}
}

// logStatus logs what was last scraped from a healthy worker, its hit
// rates over the time since the scrape since, and returns the scrape the
// line reported up to. An unhealthy or unscraped worker logs nothing; its
// next line covers the time since the last.
func (p *Prober) logStatus(ctx context.Context, ep *pool.Endpoint, since pool.Stats) pool.Stats {
	cur := ep.Stats()
	if !ep.Healthy() || cur.ScrapedAt.IsZero() {
		return since
	}
	p.log.LogAttrs(ctx, slog.LevelInfo, "worker cache status", statusAttrs(ep.URL, since, cur)...)
	return cur
}

// statusAttrs are the fields of a worker cache status line: the worker's
// load and GPU KV usage as of cur, and its caches' hits over the time from
// since to cur. A hit rate is left out when nothing was asked of the
// cache meanwhile, the LMCache fields when the worker exports none.
func statusAttrs(worker string, since, cur pool.Stats) []slog.Attr {
	attrs := make([]slog.Attr, 0, 12)
	attrs = append(attrs, slog.String("worker", worker),
		slog.Float64("gpu_kv_cache_usage", cur.KVCacheUsage), slog.Int("running", cur.Running), slog.Int("waiting", cur.Waiting),
		slog.Float64("window_seconds", cur.ScrapedAt.Sub(since.ScrapedAt).Seconds()))
	attrs = appendHits(attrs, "gpu_prefix", cur.PrefixCache.Since(since.PrefixCache))
	if lm := cur.LMCache; lm != nil {
		var then pool.HitCounters
		if since.LMCache != nil {
			then = since.LMCache.Retrieves
		}
		attrs = appendHits(attrs, "lmcache", lm.Retrieves.Since(then))
		if lm.HasLocalUsage {
			attrs = append(attrs, slog.Float64("lmcache_local_cache_usage_bytes", lm.LocalUsageBytes))
		}
	}
	return attrs
}

// appendHits appends prefix_hit_tokens, prefix_requested_tokens and, when
// any were requested, prefix_hit_rate.
func appendHits(attrs []slog.Attr, prefix string, h pool.HitCounters) []slog.Attr {
	attrs = append(attrs, slog.Float64(prefix+"_hit_tokens", h.Hits), slog.Float64(prefix+"_requested_tokens", h.Queries))
	// A worker's counters are untrusted: no NaN or infinity for a rate.
	if r := h.Hits / h.Queries; h.Queries > 0 && !math.IsNaN(r) && !math.IsInf(r, 0) {
		attrs = append(attrs, slog.Float64(prefix+"_hit_rate", r))
	}
	return attrs
}

func (p *Prober) restarted(ep *pool.Endpoint, reason string) {
	p.log.Warn("worker restarted; dropping what the router believed it cached", "endpoint", ep.URL, "reason", reason)
	if p.obs != nil {
		p.obs.Restarted(ep, reason)
	}
}

func (p *Prober) get(ctx context.Context, url string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, p.cfg.MaxBody))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: status %d", url, resp.StatusCode)
	}
	return body, nil
}

func (p *Prober) checkHealth(ctx context.Context, ep *pool.Endpoint) bool {
	_, err := p.get(ctx, ep.URL+"/health")
	ok := err == nil
	was := ep.Healthy()
	ep.SetHealthy(ok, time.Now())
	if ok != was {
		if ok {
			p.log.Info("endpoint healthy", "endpoint", ep.URL)
		} else {
			p.log.Warn("endpoint unhealthy", "endpoint", ep.URL, "err", err)
		}
		if p.obs != nil {
			p.obs.HealthChanged(ep, ok)
		}
	}
	return ok
}

func (p *Prober) fetchModels(ctx context.Context, ep *pool.Endpoint) error {
	body, err := p.get(ctx, ep.URL+"/v1/models")
	if err != nil {
		return err
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return fmt.Errorf("decode /v1/models: %w", err)
	}
	models := make([]string, 0, len(list.Data))
	for _, m := range list.Data {
		if m.ID != "" {
			models = append(models, m.ID)
		}
	}
	was := ep.Models()
	ep.SetModels(models)
	// Once when first known, and on a change: which models a worker
	// takes requests for is what an operator checks a new worker by.
	if now := ep.Models(); was == nil || !slices.Equal(was, now) {
		p.log.Info("worker models", "worker", ep.URL, "models", now)
	}
	return nil
}

// scrape reads the worker's load into ep; ok is false when it could not.
func (p *Prober) scrape(ctx context.Context, ep *pool.Endpoint) (s pool.Stats, ok bool) {
	body, err := p.get(ctx, ep.URL+"/metrics")
	inflight, peers := ep.InFlight(), ep.PeerInFlight()
	if err != nil {
		p.log.Debug("scrape", "endpoint", ep.URL, "err", err)
		return s, false
	}
	s, err = ParseMetrics(body)
	if err != nil {
		p.log.Warn("parse worker metrics", "endpoint", ep.URL, "err", err)
		return s, false
	}
	s.ScrapedAt = time.Now()
	s.InFlightAtScrape, s.PeerInFlightAtScrape = inflight, peers
	ep.SetStats(s)
	return s, true
}

// ParseMetrics extracts load and cache geometry from a worker's Prometheus
// text exposition. Samples of one family are summed across label sets
// (e.g. several engines); missing families leave zeros.
func ParseMetrics(body []byte) (pool.Stats, error) {
	parser := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return pool.Stats{}, fmt.Errorf("probe: parse metrics: %w", err)
	}
	var s pool.Stats
	s.Running = int(sum(fams["vllm:num_requests_running"]))
	s.Waiting = int(sum(fams["vllm:num_requests_waiting"]))
	if f, ok := fams["vllm:kv_cache_usage_perc"]; ok {
		s.KVCacheUsage = maxValue(f)
	} else {
		s.KVCacheUsage = maxValue(fams["vllm:gpu_cache_usage_perc"]) // before vLLM 0.10
	}
	s.PrefixCache = pool.HitCounters{Hits: sum(fams["vllm:prefix_cache_hits_total"]), Queries: sum(fams["vllm:prefix_cache_queries_total"])}
	s.LMCache = parseLMCache(fams)
	// Python's and Go's Prometheus clients both export it; vLLM's
	// multiprocess mode does not (then restarts show only through health).
	s.ProcessStart = maxValue(fams["process_start_time_seconds"])
	if f := fams["vllm:cache_config_info"]; f != nil {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				v, err := strconv.Atoi(l.GetValue())
				if err != nil {
					continue
				}
				switch l.GetName() {
				case "block_size":
					s.BlockSize = v
				case "num_gpu_blocks":
					s.NumGPUBlocks += v
				}
			}
		}
	}
	return s, nil
}

// parseLMCache reads LMCache's retrieve counters and local cache usage;
// nil when the worker exports none of them (no LMCache connector).
func parseLMCache(fams map[string]*dto.MetricFamily) *pool.LMCacheStats {
	hits, hitsOK := fams["lmcache:num_hit_tokens_total"]
	req, reqOK := fams["lmcache:num_requested_tokens_total"]
	usage, usageOK := fams["lmcache:local_cache_usage"]
	if !hitsOK && !reqOK && !usageOK {
		return nil
	}
	return &pool.LMCacheStats{
		Retrieves:       pool.HitCounters{Hits: sum(hits), Queries: sum(req)},
		LocalUsageBytes: sum(usage), HasLocalUsage: usageOK,
	}
}

func value(m *dto.Metric) float64 {
	switch {
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	case m.GetUntyped() != nil:
		return m.GetUntyped().GetValue()
	}
	return 0
}

func sum(f *dto.MetricFamily) float64 {
	var t float64
	for _, m := range f.GetMetric() {
		t += value(m)
	}
	return t
}

func maxValue(f *dto.MetricFamily) float64 {
	var t float64
	for _, m := range f.GetMetric() {
		t = max(t, value(m))
	}
	return t
}
