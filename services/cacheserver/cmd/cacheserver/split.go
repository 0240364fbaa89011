package main

import (
	"net/http"
	"path"
	"strings"
)

// splitHTTP divides the HTTP API between two listeners (--objects-listen):
// ops serves everything but the data API (/metrics, /healthz, /readyz),
// data serves only the data API (/v1/objects, /v1/stats). Kept apart, the
// port the kubelet and Prometheus must reach carries no tenant data, and
// the data port can be closed by NetworkPolicy to all but the workers.
func splitHTTP(h http.Handler) (ops, data http.Handler) {
	only := func(wantData bool) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// Cleaned as the mux would, so "/x/../v1/..." is judged as
			// the path it resolves to.
			p := path.Clean("/" + r.URL.Path)
			if (p == "/v1" || strings.HasPrefix(p, "/v1/")) != wantData {
				http.NotFound(w, r)
				return
			}
			h.ServeHTTP(w, r)
		})
	}
	return only(false), only(true)
}

// snapshotOnly serves GET /v1/kv-events/snapshot with h and answers
// anything else 404: the port exposes nothing of the data API.
func snapshotOnly(h http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /v1/kv-events/snapshot", h)
	return mux
}
