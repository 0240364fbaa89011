// Package metrics defines the router's Prometheus metrics, all prefixed
// warmpath_router_. Per-worker gauges (in-flight, health, scraped load) are
// read from the endpoint pool at scrape time by a collector, so they can
// never drift from the state the router routes on.
package metrics

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/warmpath/warmpath/services/router/internal/pool"
)

// Metrics are the router's instruments. Label values come from small
// sets: worker is a worker base URL (bounded by the pool), strategy a
// strategy name, code an HTTP status, reason one of the documented reasons.
type Metrics struct {
	Requests         *prometheus.CounterVec   // worker, strategy, code
	TTFT             *prometheus.HistogramVec // strategy
	Duration         *prometheus.HistogramVec // strategy
	DecisionDuration *prometheus.HistogramVec // strategy
	MatchRatio       *prometheus.HistogramVec // strategy
	CreditedBlocks   *prometheus.CounterVec   // strategy, tier
	// RoutingFallbacks counts cache-aware decisions that had nothing to
	// route on, by the configured strategy and strategy.Decision.Fallback.
	RoutingFallbacks *prometheus.CounterVec // strategy, reason
	Retries          *prometheus.CounterVec // reason
	PeerRelays       *prometheus.CounterVec // result
	PeerLoadPolls    *prometheus.CounterVec // result
	Rejections       *prometheus.CounterVec // reason
	Ejections        *prometheus.CounterVec // worker
	Restarts         *prometheus.CounterVec // reason
	ConfigReloads    *prometheus.CounterVec // result
	Tokenize         *prometheus.CounterVec // result
	// TokenizeLocalChat counts chats tokenized in-process, by result
	// (LocalChatReused, LocalChatRendered, LocalChatFallback).
	TokenizeLocalChat *prometheus.CounterVec
	// TokenizeReusedTokens counts the token ids those chats took from an
	// earlier turn's cached conversation prefix instead of encoding them.
	TokenizeReusedTokens prometheus.Counter
	// PanicRouted counts requests routed to every worker of their model
	// because too few were healthy (proxy.Config.PanicPercent).
	PanicRouted prometheus.Counter
	// RequestFaults counts requests that failed on every one of two or
	// more workers they reached; those failures were not counted toward
	// ejecting the workers.
	RequestFaults prometheus.Counter
}

// Results of a router replica's look at who owns a request (PeerRelays).
const (
	RelayOwn       = "own"       // this replica owns it and routes it
	RelayForwarded = "forwarded" // relayed to its owner, whose answer went to the client
	RelayFailed    = "failed"    // the owner was unreachable: routed here
)

// Reasons used as label values.
const (
	ReasonOverflow        = "overflow"         // limiter queue full (429/503)
	ReasonQueueTimeout    = "queue_timeout"    // waited too long for capacity
	ReasonNoWorker        = "no_worker"        // no healthy worker serves the model
	ReasonUnknownModel    = "unknown_model"    // no worker serves the model at all
	ReasonBodyTooLarge    = "body_too_large"   // over the body limit
	ReasonBadRequest      = "bad_request"      // malformed JSON, missing model
	ReasonUnauthorized    = "unauthorized"     // router API key mismatch
	ReasonConnectError    = "connect_error"    // retry: dial failed
	ReasonUpstream5xx     = "upstream_5xx"     // retry: worker answered 5xx
	ReasonRefused         = "refused"          // retry: worker answered 429, or 503 with Retry-After
	ReasonUpstreamReset   = "upstream_reset"   // retry: connection lost after the request was sent
	ReasonUpstreamTimeout = "upstream_timeout" // retry: no response byte within --ttfb-timeout
)

// TokenizeHead is the tokenize_total result of a long prompt routed on its
// head, new to every worker, while the rest was encoded in the background.
const TokenizeHead = "head"

// Results of an in-process chat tokenization (tokenize_local_chat_total).
const (
	LocalChatReused   = "reused"   // an earlier turn's cached prefix was reused
	LocalChatRendered = "rendered" // rendered and encoded whole
	LocalChatFallback = "fallback" // in-process rendering or encoding failed: the worker was asked
)

// New registers the metrics on reg. queue reports active and queued
// requests of the limiter.
func New(reg prometheus.Registerer, p *pool.Pool, queue func() (active, queued int)) *Metrics {
	f := promauto.With(reg)
	latency := []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160}
	m := &Metrics{
		Requests: f.NewCounterVec(prometheus.CounterOpts{
			Name: "warmpath_router_requests_total",
			Help: "Proxied requests by chosen worker, strategy and HTTP status returned to the client (worker is empty when none was chosen).",
		}, []string{"worker", "strategy", "code"}),
		TTFT: f.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "warmpath_router_ttft_seconds",
			Help:    "Router-side time to first token: from request arrival to the first byte of the upstream response body.",
			Buckets: latency,
		}, []string{"strategy"}),
		Duration: f.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "warmpath_router_request_duration_seconds",
			Help:    "Time from request arrival to the end of the response.",
			Buckets: latency,
		}, []string{"strategy"}),
		DecisionDuration: f.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "warmpath_router_routing_decision_duration_seconds",
			Help:    "Time a strategy took to pick a worker.",
			Buckets: []float64{1e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 5e-3, 1e-2},
		}, []string{"strategy"}),
		MatchRatio: f.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "warmpath_router_prefix_match_ratio",
			Help:    "Fraction of the prompt's chunks believed cached on the chosen worker (cache-aware strategies).",
			Buckets: []float64{0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1},
		}, []string{"strategy"}),
		CreditedBlocks: f.NewCounterVec(prometheus.CounterOpts{
			Name: "warmpath_router_credited_blocks_total",
			Help: "Prompt blocks a cache-aware strategy believed cached on the worker it chose, by the tier credited (gpu, cpu: LMCache L1, l2: the shared cache); kvaware only.",
		}, []string{"strategy", "tier"}),
		RoutingFallbacks: f.NewCounterVec(prometheus.CounterOpts{
			Name: "warmpath_router_routing_fallbacks_total",
			Help: "Cache-aware routing decisions that had nothing to route on, by configured strategy and reason (no_prefix_cached: no worker was believed to hold any of the prompt; no_tokens: kvaware had no token ids and routed by prefixaware). A retry decides again.",
		}, []string{"strategy", "reason"}),
		Retries: f.NewCounterVec(prometheus.CounterOpts{
			Name: "warmpath_router_retries_total",
			Help: "Requests retried on another worker before any byte reached the client, by reason (connect_error, refused, upstream_reset, upstream_5xx; which are retried is --retry-on).",
		}, []string{"reason"}),
		PeerRelays: f.NewCounterVec(prometheus.CounterOpts{
			Name: "warmpath_router_peer_relays_total",
			Help: "With --peers: cache-aware requests this replica received, by who routed them (own: this replica owns the prompt; forwarded: relayed to the replica that owns it; failed: the owner was unreachable, routed here).",
		}, []string{"result"}),
		PeerLoadPolls: f.NewCounterVec(prometheus.CounterOpts{
			Name: "warmpath_router_peer_load_polls_total",
			Help: "With --peers: reads of another replica's in-flight requests per worker (--peer-load-interval), by result (ok, failed). A replica that fails them stops counting towards the workers' load once its report is stale.",
		}, []string{"result"}),
		Rejections: f.NewCounterVec(prometheus.CounterOpts{
			Name: "warmpath_router_rejections_total",
			Help: "Requests the router answered itself, by reason (overflow, queue_timeout, no_worker, unknown_model, body_too_large, bad_request, unauthorized).",
		}, []string{"reason"}),
		Ejections: f.NewCounterVec(prometheus.CounterOpts{
			Name: "warmpath_router_ejections_total",
			Help: "Passive outlier ejections of a worker after consecutive failures.",
		}, []string{"worker"}),
		Restarts: f.NewCounterVec(prometheus.CounterOpts{
			Name: "warmpath_router_worker_restarts_total",
			Help: "Worker restarts the router noticed (health_returned, process_start_changed); each drops what the router believed the worker cached.",
		}, []string{"reason"}),
		ConfigReloads: f.NewCounterVec(prometheus.CounterOpts{
			Name: "warmpath_router_config_reloads_total",
			Help: "Routing configuration reloads by result (success, error).",
		}, []string{"result"}),
		Tokenize: f.NewCounterVec(prometheus.CounterOpts{
			Name: "warmpath_router_tokenize_total",
			Help: "Prompt tokenizations for kvaware by result (cached, tokenized, head: a long prompt new to every worker, routed on its head while the rest was encoded in the background, error: routed by prefixaware instead).",
		}, []string{"result"}),
		TokenizeLocalChat: f.NewCounterVec(prometheus.CounterOpts{
			Name: "warmpath_router_tokenize_local_chat_total",
			Help: "Chats tokenized in-process (--tokenizer-local with a chat template), by result (reused: an earlier turn's cached prefix was reused; rendered: encoded whole; fallback: failed, the worker was asked).",
		}, []string{"result"}),
		TokenizeReusedTokens: f.NewCounter(prometheus.CounterOpts{
			Name: "warmpath_router_tokenize_reused_tokens_total",
			Help: "Token ids of in-process tokenizations taken from a cached prefix instead of encoded: an earlier turn's conversation, or an earlier completion prompt's leading text (a document asked another question).",
		}),
		PanicRouted: f.NewCounter(prometheus.CounterOpts{
			Name: "warmpath_router_panic_routed_requests_total",
			Help: "Requests routed to every worker of their model, healthy or not, because fewer than the panic threshold were available.",
		}),
		RequestFaults: f.NewCounter(prometheus.CounterOpts{
			Name: "warmpath_router_request_faults_total",
			Help: "Requests that failed on every one of two or more workers they reached; the request, not the workers, was held at fault (no ejection counted).",
		}),
	}
	reg.MustRegister(&poolCollector{pool: p, queue: queue})
	// Known label values start at zero, so dashboards and alerts see a
	// series (and a rate of 0) before the first retry or rejection.
	for _, r := range []string{ReasonConnectError, ReasonRefused, ReasonUpstreamReset, ReasonUpstream5xx} {
		m.Retries.WithLabelValues(r)
	}
	for _, r := range []string{RelayOwn, RelayForwarded, RelayFailed} {
		m.PeerRelays.WithLabelValues(r)
	}
	for _, r := range []string{"ok", "failed"} {
		m.PeerLoadPolls.WithLabelValues(r)
	}
	for _, r := range []string{"health_returned", "process_start_changed"} {
		m.Restarts.WithLabelValues(r)
	}
	for _, r := range []string{ReasonOverflow, ReasonQueueTimeout, ReasonNoWorker, ReasonUnknownModel, ReasonBodyTooLarge, ReasonBadRequest, ReasonUnauthorized} {
		m.Rejections.WithLabelValues(r)
	}
	for _, r := range []string{LocalChatReused, LocalChatRendered, LocalChatFallback} {
		m.TokenizeLocalChat.WithLabelValues(r)
	}
	return m
}

var (
	inflightDesc = prometheus.NewDesc("warmpath_router_inflight_requests",
		"Requests the router has in flight at each worker.", []string{"worker"}, nil)
	prefillDesc = prometheus.NewDesc("warmpath_router_pending_prefill_tokens",
		"Prompt tokens the router sent each worker that it has not begun answering (kvaware's estimate of its prefill queue).", []string{"worker"}, nil)
	healthyDesc = prometheus.NewDesc("warmpath_router_worker_healthy",
		"1 when the worker passes active health checks and is not ejected, else 0.", []string{"worker"}, nil)
	loadDesc = prometheus.NewDesc("warmpath_router_worker_scraped_requests",
		"Requests the worker last reported, by state (running, waiting).", []string{"worker", "state"}, nil)
	kvDesc = prometheus.NewDesc("warmpath_router_worker_kv_cache_usage_ratio",
		"The worker's last scraped vllm:kv_cache_usage_perc (0..1).", []string{"worker"}, nil)
	activeDesc = prometheus.NewDesc("warmpath_router_active_requests",
		"Requests holding a router concurrency slot.", nil, nil)
	queuedDesc = prometheus.NewDesc("warmpath_router_queued_requests",
		"Requests waiting for a router concurrency slot.", nil, nil)
	workersDesc = prometheus.NewDesc("warmpath_router_workers",
		"Discovered workers.", nil, nil)
)

type poolCollector struct {
	pool  *pool.Pool
	queue func() (int, int)
}

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{inflightDesc, prefillDesc, healthyDesc, loadDesc, kvDesc, activeDesc, queuedDesc, workersDesc} {
		ch <- d
	}
}

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	eps := c.pool.All()
	ch <- prometheus.MustNewConstMetric(workersDesc, prometheus.GaugeValue, float64(len(eps)))
	for _, ep := range eps {
		ch <- prometheus.MustNewConstMetric(inflightDesc, prometheus.GaugeValue, float64(ep.InFlight()), ep.URL)
		ch <- prometheus.MustNewConstMetric(prefillDesc, prometheus.GaugeValue, float64(ep.PendingPrefill()), ep.URL)
		ch <- prometheus.MustNewConstMetric(healthyDesc, prometheus.GaugeValue, b2f(ep.Available()), ep.URL)
		s := ep.Stats()
		ch <- prometheus.MustNewConstMetric(loadDesc, prometheus.GaugeValue, float64(s.Running), ep.URL, "running")
		ch <- prometheus.MustNewConstMetric(loadDesc, prometheus.GaugeValue, float64(s.Waiting), ep.URL, "waiting")
		ch <- prometheus.MustNewConstMetric(kvDesc, prometheus.GaugeValue, s.KVCacheUsage, ep.URL)
	}
	if c.queue != nil {
		a, q := c.queue()
		ch <- prometheus.MustNewConstMetric(activeDesc, prometheus.GaugeValue, float64(a))
		ch <- prometheus.MustNewConstMetric(queuedDesc, prometheus.GaugeValue, float64(q))
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Code formats an HTTP status as a label value.
func Code(status int) string { return strconv.Itoa(status) }
