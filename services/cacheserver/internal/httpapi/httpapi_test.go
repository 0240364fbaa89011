package httpapi

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmpath/warmpath/services/cacheserver/internal/metrics"
	"github.com/warmpath/warmpath/services/cacheserver/internal/store"
)

func TestObjectsAndMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	mem := store.NewMemory(64<<20, store.Options{})
	srv := httptest.NewServer(Handler(Config{MaxValueBytes: 1 << 20}, mem, metrics.New(reg, mem), reg))
	defer srv.Close()
	do := func(method, path string, body []byte, headers ...string) (*http.Response, []byte) {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, bytes.NewReader(body))
		for i := 0; i+1 < len(headers); i += 2 {
			req.Header.Set(headers[i], headers[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}
	tests := []struct {
		name, method, path string
		body               []byte
		headers            []string
		want               int
	}{
		{"put", "PUT", "/v1/objects/k1", []byte("value"), []string{"X-Lmcache-Dtype", "3", "X-Lmcache-Shape", "[2,16,8,128]"}, 204},
		{"get", "GET", "/v1/objects/k1", nil, nil, 200},
		{"head", "HEAD", "/v1/objects/k1", nil, nil, 200},
		{"miss", "GET", "/v1/objects/nope", nil, nil, 404},
		{"too large", "PUT", "/v1/objects/big", make([]byte, 2<<20), nil, 413},
		{"bad shape", "PUT", "/v1/objects/k2", []byte("v"), []string{"X-Lmcache-Shape", "[1,2"}, 400},
		{"key too long", "PUT", "/v1/objects/" + strings.Repeat("k", 151), []byte("v"), nil, 400},
		{"key over the disk format's 65,535", "PUT", "/v1/objects/" + strings.Repeat("k", 65536), []byte("v"), nil, 400},
		{"delete", "DELETE", "/v1/objects/k1", nil, nil, 204},
		{"deleted", "GET", "/v1/objects/k1", nil, nil, 404},
		{"stats", "GET", "/v1/stats", nil, nil, 200},
		{"healthz", "GET", "/healthz", nil, nil, 200},
	}
	for _, tt := range tests {
		resp, body := do(tt.method, tt.path, tt.body, tt.headers...)
		if resp.StatusCode != tt.want {
			t.Errorf("%s: status %d (%s), want %d", tt.name, resp.StatusCode, body, tt.want)
		}
		if tt.name == "get" && (string(body) != "value" || resp.Header.Get("X-Lmcache-Dtype") != "3" || resp.Header.Get("X-Lmcache-Shape") != "[2,16,8,128]") {
			t.Errorf("get: body %q, headers %v", body, resp.Header)
		}
		if resp.StatusCode >= 400 && tt.method != "HEAD" && !bytes.Contains(body, []byte(`"error"`)) {
			t.Errorf("%s: error body is not OpenAI-style JSON: %s", tt.name, body)
		}
	}
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool not on PATH: run `make tools`")
	}
	_, exposition := do("GET", "/metrics", nil)
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(exposition)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool check metrics: %v\n%s", err, out)
	}
	for _, name := range []string{"warmpath_cache_requests_total", "warmpath_cache_hits_total", "warmpath_cache_stored_bytes", "warmpath_cache_capacity_bytes", "warmpath_cache_evictions_total", "warmpath_cache_request_duration_seconds_bucket", "warmpath_cache_expired_total", "warmpath_cache_auth_failures_total",
		"warmpath_cache_kv_events_published_total", "warmpath_cache_kv_events_dropped_total", "warmpath_cache_kv_events_unparsed_keys_total"} {
		if !bytes.Contains(exposition, []byte(name)) {
			t.Errorf("/metrics lacks %s", name)
		}
	}
}
