package main

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestSplitHTTP: with --objects-listen, tenant data (/v1/objects,
// /v1/stats) is served only there, and /metrics and the probes only on
// --http-listen, so a NetworkPolicy can open the one to Prometheus and the
// kubelet and the other to the workers alone.
func TestSplitHTTP(t *testing.T) {
	all := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) })
	ops, data := splitHTTP(all)
	tests := []struct {
		path          string
		onOps, onData int
	}{
		{"/healthz", http.StatusTeapot, http.StatusNotFound},
		{"/readyz", http.StatusTeapot, http.StatusNotFound},
		{"/metrics", http.StatusTeapot, http.StatusNotFound},
		{"/v1/objects/k", http.StatusNotFound, http.StatusTeapot},
		{"/v1/stats", http.StatusNotFound, http.StatusTeapot},
		// A cleaned-up spelling must not slip data past the split.
		{"/v1/../v1/objects/k", http.StatusNotFound, http.StatusTeapot},
		{"//v1/objects/k", http.StatusNotFound, http.StatusTeapot},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			for _, c := range []struct {
				name string
				h    http.Handler
				want int
			}{{"ops", ops, tt.onOps}, {"data", data, tt.onData}} {
				rec := httptest.NewRecorder()
				req := httptest.NewRequest(http.MethodGet, "http://x/", nil)
				req.URL.Path = tt.path
				c.h.ServeHTTP(rec, req)
				if rec.Code != c.want {
					t.Errorf("%s listener: %s answered %d, want %d", c.name, tt.path, rec.Code, c.want)
				}
			}
		})
	}
}
