// Package httpapi is the cache server's HTTP face: objects for tools and
// tests, health, readiness, stats and Prometheus metrics.
package httpapi

import (
	"encoding/json"
	"errors"
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

// Handler returns the HTTP API over mem. maxValue bounds a PUT body.
func Handler(mem store.Store, m *metrics.Metrics, reg *prometheus.Registry, maxValue int64) http.Handler {
	mux := http.NewServeMux()
	h := &api{mem: mem, metrics: m, max: maxValue}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("GET /v1/stats", h.stats)
	mux.HandleFunc("GET /v1/objects/{key}", h.get)
	mux.HandleFunc("HEAD /v1/objects/{key}", h.get)
	mux.HandleFunc("PUT /v1/objects/{key}", h.put)
	mux.HandleFunc("DELETE /v1/objects/{key}", h.del)
	return mux
}

type api struct {
	mem     store.Store
	metrics *metrics.Metrics
	max     int64
}

// Metadata travels in headers: LMCache's fmt, dtype and shape.
const (
	headerFmt   = "X-Lmcache-Fmt"
	headerDtype = "X-Lmcache-Dtype"
	headerShape = "X-Lmcache-Shape"
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
