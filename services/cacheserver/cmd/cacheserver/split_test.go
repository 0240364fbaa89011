package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
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

// TestSnapshotListener: --kv-events-snapshot-listen serves the KV-event
// snapshot without the token the data API wants (it tells what the
// unauthenticated event stream tells), and nothing else.
func TestSnapshotListener(t *testing.T) {
	p := startServer(t, []string{envHTTPToken + "=secret-token"}, "--kv-events-endpoint", "tcp://127.0.0.1:0",
		"--kv-events-snapshot-listen", "127.0.0.1:0")
	tests := []struct {
		addr, path string
		want       int
	}{
		{p.snapshot, "/v1/kv-events/snapshot?model=m", http.StatusOK},
		{p.snapshot, "/v1/objects/k", http.StatusNotFound},
		{p.snapshot, "/metrics", http.StatusNotFound},
		{p.httpA, "/v1/kv-events/snapshot?model=m", http.StatusUnauthorized},
	}
	for _, tt := range tests {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+tt.addr+tt.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tt.want {
			t.Errorf("GET %s%s without a token: %d %s, want %d", tt.addr, tt.path, resp.StatusCode, body, tt.want)
		}
		if tt.want == http.StatusOK && !strings.HasPrefix(string(body), `{"seq":`) {
			t.Errorf("snapshot %s, want {\"seq\":...}", body)
		}
	}
}
