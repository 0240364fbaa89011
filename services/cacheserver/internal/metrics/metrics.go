// Package metrics defines the cache server's Prometheus metrics, all
// prefixed warmpath_cache_. Tier gauges and counters are read from the
// store at scrape time, so they cannot drift from it.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/warmpath/warmpath/services/cacheserver/internal/store"
)

// Metrics are the cache server's instruments. protocol is lm, resp or
// http; op one of get, put, exist, delete, health; result hit, miss, ok or
// error.
type Metrics struct {
	Requests *prometheus.CounterVec   // protocol, op, result
	Duration *prometheus.HistogramVec // protocol, op
	BytesIn  *prometheus.CounterVec   // protocol
	BytesOut *prometheus.CounterVec   // protocol
	Errors   *prometheus.CounterVec   // protocol, reason
	// Forwarded counts requests sent to the key's owner in cluster mode.
	Forwarded *prometheus.CounterVec // op, result
	// AuthFailures counts requests refused for a missing or wrong
	// credential (RESP password, HTTP bearer token).
	AuthFailures *prometheus.CounterVec // protocol
	// KV events (--kv-events-endpoint); they stay at zero when it is off.
	KVEvents KVEvents
}

// KVEvents count the store's KV events (see package l2events).
type KVEvents struct {
	// Published counts events handed to the publisher.
	Published prometheus.Counter
	// Dropped counts key changes not published one by one because the
	// event queue was full; an AllBlocksCleared follows them.
	Dropped prometheus.Counter
	// Unparsed counts changes of keys that are not LMCache chunk keys.
	Unparsed prometheus.Counter
}

// TierSource reports each tier's counters, fastest first: store.Memory or
// store.Tiered. The tier metrics are read from it at each scrape.
type TierSource interface {
	Tiers() []store.TierStats
}

// New registers the metrics on reg, reading tier state from tiers.
func New(reg prometheus.Registerer, tiers TierSource) *Metrics {
	f := promauto.With(reg)
	m := &Metrics{
		Requests: f.NewCounterVec(prometheus.CounterOpts{
			Name: "warmpath_cache_requests_total",
			Help: "Requests by protocol (lm, resp, http), operation and result (hit, miss, ok, error).",
		}, []string{"protocol", "op", "result"}),
		Duration: f.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "warmpath_cache_request_duration_seconds",
			Help:    "Time to serve a request, from its header read to its reply written, by protocol and operation.",
			Buckets: []float64{1e-5, 5e-5, 1e-4, 5e-4, 1e-3, 5e-3, 0.01, 0.05, 0.1, 0.5, 1, 5},
		}, []string{"protocol", "op"}),
		BytesIn: f.NewCounterVec(prometheus.CounterOpts{
			Name: "warmpath_cache_received_bytes_total",
			Help: "Value bytes received (PUT/SET payloads) by protocol.",
		}, []string{"protocol"}),
		BytesOut: f.NewCounterVec(prometheus.CounterOpts{
			Name: "warmpath_cache_sent_bytes_total",
			Help: "Value bytes sent (GET payloads) by protocol.",
		}, []string{"protocol"}),
		Errors: f.NewCounterVec(prometheus.CounterOpts{
			Name: "warmpath_cache_protocol_errors_total",
			Help: "Connections closed for malformed input, by protocol and reason.",
		}, []string{"protocol", "reason"}),
	}
	m.Forwarded = f.NewCounterVec(prometheus.CounterOpts{
		Name: "warmpath_cache_forwarded_requests_total",
		Help: "Requests forwarded to the owning peer in cluster mode, by operation (get, put, exist, delete) and result (hit, miss, ok, error: the peer failed, answered as a miss; skipped: the peer is ejected after repeated failures, answered as a miss without trying it).",
	}, []string{"op", "result"})
	m.AuthFailures = f.NewCounterVec(prometheus.CounterOpts{
		Name: "warmpath_cache_auth_failures_total",
		Help: "Requests refused for a missing or wrong credential, by protocol (resp: NOAUTH or WRONGPASS; http: 401).",
	}, []string{"protocol"})
	m.KVEvents = KVEvents{
		Published: f.NewCounter(prometheus.CounterOpts{
			Name: "warmpath_cache_kv_events_published_total",
			Help: "KV events (BlockStored, BlockRemoved, AllBlocksCleared) handed to the ZMQ publisher of --kv-events-endpoint.",
		}),
		Dropped: f.NewCounter(prometheus.CounterOpts{
			Name: "warmpath_cache_kv_events_dropped_total",
			Help: "Key changes not published one by one because the KV event queue was full; an AllBlocksCleared followed, and subscribers resync from the snapshot.",
		}),
		Unparsed: f.NewCounter(prometheus.CounterOpts{
			Name: "warmpath_cache_kv_events_unparsed_keys_total",
			Help: "Changes (store, removal) of keys that are not LMCache chunk keys, which make no KV event.",
		}),
	}
	// Exported at zero from the start, so dashboards show 0, not "no data".
	for _, op := range []string{"get", "put", "exist"} {
		m.Forwarded.WithLabelValues(op, "error")
	}
	for _, p := range []string{"resp", "http"} {
		m.AuthFailures.WithLabelValues(p)
	}
	reg.MustRegister(&tierCollector{tiers: tiers})
	return m
}

var (
	hitsDesc      = prometheus.NewDesc("warmpath_cache_hits_total", "Lookups served from a tier.", []string{"tier"}, nil)
	missesDesc    = prometheus.NewDesc("warmpath_cache_misses_total", "Lookups a tier could not serve.", []string{"tier"}, nil)
	bytesDesc     = prometheus.NewDesc("warmpath_cache_stored_bytes", "Bytes resident in a tier, per-entry overhead included.", []string{"tier"}, nil)
	capacityDesc  = prometheus.NewDesc("warmpath_cache_capacity_bytes", "A tier's configured capacity.", []string{"tier"}, nil)
	objectsDesc   = prometheus.NewDesc("warmpath_cache_objects", "Objects resident in a tier.", []string{"tier"}, nil)
	evictionsDesc = prometheus.NewDesc("warmpath_cache_evictions_total", "Objects evicted from a tier for space.", []string{"tier"}, nil)
	rejectedDesc  = prometheus.NewDesc("warmpath_cache_rejected_objects_total", "Objects too large for a tier, not stored.", []string{"tier"}, nil)
	expiredDesc   = prometheus.NewDesc("warmpath_cache_expired_total", "Objects reclaimed from a tier after their expiry (found on a read, reached by eviction, or on disk at start).", []string{"tier"}, nil)
)

type tierCollector struct{ tiers TierSource }

func (c *tierCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{hitsDesc, missesDesc, bytesDesc, capacityDesc, objectsDesc, evictionsDesc, rejectedDesc, expiredDesc} {
		ch <- d
	}
}

func (c *tierCollector) Collect(ch chan<- prometheus.Metric) {
	for _, t := range c.tiers.Tiers() {
		st := t.Stats
		ch <- prometheus.MustNewConstMetric(hitsDesc, prometheus.CounterValue, float64(st.Hits), t.Name)
		ch <- prometheus.MustNewConstMetric(missesDesc, prometheus.CounterValue, float64(st.Misses), t.Name)
		ch <- prometheus.MustNewConstMetric(bytesDesc, prometheus.GaugeValue, float64(st.Bytes), t.Name)
		ch <- prometheus.MustNewConstMetric(capacityDesc, prometheus.GaugeValue, float64(st.Capacity), t.Name)
		ch <- prometheus.MustNewConstMetric(objectsDesc, prometheus.GaugeValue, float64(st.Objects), t.Name)
		ch <- prometheus.MustNewConstMetric(evictionsDesc, prometheus.CounterValue, float64(st.Evictions), t.Name)
		ch <- prometheus.MustNewConstMetric(rejectedDesc, prometheus.CounterValue, float64(st.Rejected), t.Name)
		ch <- prometheus.MustNewConstMetric(expiredDesc, prometheus.CounterValue, float64(st.Expired), t.Name)
	}
}
