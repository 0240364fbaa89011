// Package httpapi is the cache server's HTTP face: objects for tools and
// tests, health, readiness, stats and Prometheus metrics.
package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/warmpath/warmpath/libs/lmproto"
	"github.com/warmpath/warmpath/libs/openai"
	"github.com/warmpath/warmpath/services/cacheserver/internal/metrics"
	"github.com/warmpath/warmpath/services/cacheserver/internal/store"
)

// Config tunes the HTTP API.
type Config struct {
	// MaxValueBytes bounds a PUT body.
	MaxValueBytes int64
	// Token, when set, must come as "Authorization: Bearer <token>" on
	// /v1/objects and /v1/stats. /healthz and /readyz stay open (kubelet
	// probes carry no token).
	Token string
	// ProtectMetrics puts /metrics behind Token too. Off by default: a
	// Prometheus scrape config rarely carries the cache server's token,
	// and the metrics hold no keys or values.
	ProtectMetrics bool
	// Ready reports whether the server is ready for traffic; /readyz
	// answers 503 until it is (the disk tier's index is loading). Nil:
	// always ready.
	Ready func() bool
	// KVEventsSnapshot, when set, serves GET /v1/kv-events/snapshot on the
	// data API, behind Token (--kv-events-endpoint).
	KVEventsSnapshot http.Handler
}

// Objects is the store /v1/objects reads and writes: store.Memory or
// store.Tiered. Now turns a TTL header into an expiry, and an expiry back
// into the time left.
type Objects interface {
	Get(key string) (*store.Object, bool)
	Put(key string, obj *store.Object) bool
	Delete(key string) bool
	Now() time.Time
}

// Store is what the API serves: its objects, and the tiers' counters
// /v1/stats reports.
type Store interface {
	Objects
	Tiers() []store.TierStats
}

// Handler returns the HTTP API over mem.
func Handler(cfg Config, mem Store, m *metrics.Metrics, reg *prometheus.Registry) http.Handler {
	mux := http.NewServeMux()
	h := &api{mem: mem, metrics: m, max: cfg.MaxValueBytes}
	guard := func(f http.HandlerFunc) http.Handler { return bearer(cfg.Token, m, f) }
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if cfg.Ready != nil && !cfg.Ready() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	metricsHandler := promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})
	if cfg.ProtectMetrics {
		metricsHandler = bearer(cfg.Token, m, metricsHandler)
	}
	mux.Handle("GET /metrics", metricsHandler)
	mux.Handle("GET /v1/stats", guard(h.stats))
	mux.Handle("GET /v1/objects/{key}", guard(h.get))
	mux.Handle("HEAD /v1/objects/{key}", guard(h.get))
	mux.Handle("PUT /v1/objects/{key}", guard(h.put))
	mux.Handle("DELETE /v1/objects/{key}", guard(h.del))
	if cfg.KVEventsSnapshot != nil {
		mux.Handle("GET /v1/kv-events/snapshot", bearer(cfg.Token, m, cfg.KVEventsSnapshot))
	}
	return mux
}

type api struct {
	mem     Store
	metrics *metrics.Metrics
	max     int64
}

// Metadata travels in headers: LMCache's fmt, dtype and shape, and the
// object's time to live in whole seconds (on PUT: the TTL to store it
// with, else the server's default; on GET: the time it has left, rounded
// up; absent: it never expires).
const (
	headerFmt   = "X-Lmcache-Fmt"
	headerDtype = "X-Lmcache-Dtype"
	headerShape = "X-Lmcache-Shape"
	headerTTL   = "X-Warmpath-Ttl-Seconds"
)

func (a *api) done(op, result string, start time.Time) {
	a.metrics.Requests.WithLabelValues("http", op, result).Inc()
	a.metrics.Duration.WithLabelValues("http", op).Observe(time.Since(start).Seconds())
}

func (a *api) get(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	key := r.PathValue("key")
	obj, ok := a.mem.Get(key)
	if !ok {
		a.done("get", "miss", start)
		openai.WriteError(w, openai.Errorf(http.StatusNotFound, "no object %q", key))
		return
	}
	hd := w.Header()
	hd.Set("Content-Type", "application/octet-stream")
	hd.Set("Content-Length", strconv.Itoa(len(obj.Value)))
	hd.Set(headerFmt, strconv.Itoa(int(obj.Meta.Fmt)))
	hd.Set(headerDtype, strconv.Itoa(int(obj.Meta.Dtype)))
	b, _ := json.Marshal(obj.Meta.Shape)
	hd.Set(headerShape, string(b))
	if obj.Expires != 0 {
		left := obj.Expires - a.mem.Now().UnixNano()
		hd.Set(headerTTL, strconv.FormatInt(max((left+int64(time.Second)-1)/int64(time.Second), 0), 10))
	}
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		n, _ := w.Write(obj.Value)
		a.metrics.BytesOut.WithLabelValues("http").Add(float64(n))
	}
	a.done("get", "hit", start)
}

func (a *api) put(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	key := r.PathValue("key")
	if err := lmproto.ValidKey(key); err != nil {
		a.done("put", "error", start)
		openai.WriteError(w, openai.ParamErrorf("key", "%v", err))
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, a.max))
	if err != nil {
		a.done("put", "error", start)
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			openai.WriteError(w, openai.Errorf(http.StatusRequestEntityTooLarge, "object exceeds %d bytes", a.max))
			return
		}
		openai.WriteError(w, openai.Errorf(http.StatusBadRequest, "read body: %v", err))
		return
	}
	obj := &store.Object{Value: body}
	if s := r.Header.Get(headerTTL); s != "" {
		ttl, err := parseTTL(s)
		if err != nil {
			a.done("put", "error", start)
			openai.WriteError(w, openai.ParamErrorf(headerTTL, "%v", err))
			return
		}
		obj.Expires = a.mem.Now().Add(ttl).UnixNano()
	}
	obj.Meta.Fmt = atoi32(r.Header.Get(headerFmt))
	obj.Meta.Dtype = atoi32(r.Header.Get(headerDtype))
	if s := r.Header.Get(headerShape); s != "" {
		if err := json.Unmarshal([]byte(s), &obj.Meta.Shape); err != nil {
			a.done("put", "error", start)
			openai.WriteError(w, openai.Errorf(http.StatusBadRequest, "%s: want a JSON array of 4 integers", headerShape))
			return
		}
	}
	if !a.mem.Put(key, obj) {
		a.done("put", "error", start)
		openai.WriteError(w, openai.Errorf(http.StatusRequestEntityTooLarge, "object larger than a memory shard"))
		return
	}
	a.metrics.BytesIn.WithLabelValues("http").Add(float64(len(body)))
	a.done("put", "ok", start)
	w.WriteHeader(http.StatusNoContent)
}

// maxTTL bounds X-Warmpath-TTL-Seconds (100 years): far enough to mean
// "long", near enough that now + TTL cannot overflow.
const maxTTL = 100 * 365 * 24 * time.Hour

// parseTTL reads X-Warmpath-TTL-Seconds: a positive whole number of
// seconds, at most 100 years.
func parseTTL(s string) (time.Duration, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("want a whole number of seconds, got %q", s)
	}
	if n <= 0 || n > int64(maxTTL/time.Second) {
		return 0, fmt.Errorf("want 1 to %d seconds, got %d", int64(maxTTL/time.Second), n)
	}
	return time.Duration(n) * time.Second, nil
}

func atoi32(s string) int32 {
	v, _ := strconv.ParseInt(s, 10, 32)
	return int32(v)
}

func (a *api) del(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	if !a.mem.Delete(r.PathValue("key")) {
		a.done("delete", "miss", start)
		openai.WriteError(w, openai.Errorf(http.StatusNotFound, "no object %q", r.PathValue("key")))
		return
	}
	a.done("delete", "ok", start)
	w.WriteHeader(http.StatusNoContent)
}

func (a *api) stats(w http.ResponseWriter, _ *http.Request) {
	tiers := map[string]any{}
	for _, t := range a.mem.Tiers() {
		tiers[t.Name] = map[string]any{
			"objects": t.Objects, "bytes": t.Bytes, "capacityBytes": t.Capacity,
			"hits": t.Hits, "misses": t.Misses, "evictions": t.Evictions, "rejected": t.Rejected, "expired": t.Expired,
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"tiers": tiers})
}
