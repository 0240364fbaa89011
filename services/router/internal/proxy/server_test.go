package proxy

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/tidwall/gjson"

	"github.com/warmpath/warmpath/services/router/internal/discovery"
	"github.com/warmpath/warmpath/services/router/internal/limiter"
	"github.com/warmpath/warmpath/services/router/internal/metrics"
	"github.com/warmpath/warmpath/services/router/internal/pool"
	"github.com/warmpath/warmpath/services/router/strategy"
)

// startServer serves a router with no workers on loopback.
func startServer(t *testing.T, cfg Config) string {
	t.Helper()
	p := pool.New()
	s, err := strategy.New(strategy.Defaults())
	if err != nil {
		t.Fatal(err)
	}
	lim := limiter.New(limiter.Config{})
	srv := New(cfg, Deps{Pool: p, Limiter: lim, Metrics: metrics.New(prometheus.NewRegistry(), p, lim.Stats), Routing: &Routing{Strategy: s}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Shutdown(time.Second) })
	return ln.Addr().String()
}

// TestMalformedRequests sends what no HTTP client library would, over raw
// TCP: each gets an OpenAI-style error and a closed connection.
func TestMalformedRequests(t *testing.T) {
	addr := startServer(t, Config{MaxBodyBytes: 1024})
	tests := []struct {
		name string
		raw  string
		want int
	}{
		{"garbage", "NOT HTTP AT ALL\r\n\r\n", 400},
		{"body over the limit", "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n" + strings.Repeat("x", 5000), 413},
		{"chunked body over the limit", "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n1400\r\n" + strings.Repeat("x", 5120) + "\r\n0\r\n\r\n", 413},
		{"headers over the buffer", "POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 20<<10) + "\r\n\r\n", 431},
		{"bad content-length", "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -3\r\n\r\n", 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nc, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			_ = nc.SetDeadline(time.Now().Add(5 * time.Second))
			if _, err := io.WriteString(nc, tt.raw); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(nc), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var e struct {
				Error struct {
					Message string `json:"message"`
					Code    int    `json:"code"`
				} `json:"error"`
			}
			if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
				t.Fatalf("status %d, body not an OpenAI error: %v", resp.StatusCode, err)
			}
			if resp.StatusCode != tt.want || e.Error.Code != tt.want || e.Error.Message == "" {
				t.Fatalf("status %d code %d %q, want %d", resp.StatusCode, e.Error.Code, e.Error.Message, tt.want)
			}
			if !resp.Close {
				t.Error("connection kept open after an unreadable request")
			}
		})
	}
}

// startProxyTo serves a router in front of one worker.
func startProxyTo(t *testing.T, workerURL string) string {
	t.Helper()
	return startProxyWith(t, workerURL, Config{MaxRetries: 0})
}

// startProxyWith is startProxyTo with cfg.
func startProxyWith(t *testing.T, workerURL string, cfg Config) string {
	t.Helper()
	return startProxyRouting(t, workerURL, cfg, strategy.Defaults())
}

// startProxyRouting is startProxyWith with the strategy configuration sc.
func startProxyRouting(t *testing.T, workerURL string, cfg Config, sc strategy.Config) string {
	t.Helper()
	p := pool.New()
	p.Update([]discovery.Target{{URL: workerURL}})
	ep := p.Get(workerURL)
	ep.SetHealthy(true, time.Now())
	ep.SetModels([]string{"m"})
	s, err := strategy.New(sc)
	if err != nil {
		t.Fatal(err)
	}
	lim := limiter.New(limiter.Config{})
	srv := New(cfg, Deps{Pool: p, Limiter: lim, Metrics: metrics.New(prometheus.NewRegistry(), p, lim.Stats), Routing: &Routing{Strategy: s}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Shutdown(time.Second) })
	return "http://" + ln.Addr().String()
}

// TestResponseModes: each way a worker can frame its answer reaches the
// client intact — read whole when small and sized, streamed otherwise —
// and a worker that breaks a sized answer yields an error, not a
// truncated body.
func TestResponseModes(t *testing.T) {
	big := strings.Repeat("y", 2<<20)
	worker := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		switch mode := gjson.GetBytes(b, "prompt").String(); mode {
		case "small":
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"ok":true}`)
		case "big":
			w.Header().Set("Content-Length", strconv.Itoa(len(big)))
			_, _ = io.WriteString(w, big)
		case "unsized":
			for range 3 {
				_, _ = io.WriteString(w, "part;")
				w.(http.Flusher).Flush()
			}
		case "sse":
			w.Header().Set("Content-Type", "text/event-stream")
			for _, ev := range []string{"data: 1\n\n", "data: 2\n\n", "data: [DONE]\n\n"} {
				_, _ = io.WriteString(w, ev)
				w.(http.Flusher).Flush()
			}
		case "broken":
			w.Header().Set("Content-Length", "100")
			_, _ = io.WriteString(w, "only ten b")
			w.(http.Flusher).Flush()
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				_ = conn.Close()
			}
		default:
			http.Error(w, "unknown mode "+mode, http.StatusBadRequest)
		}
	}))
	t.Cleanup(worker.Close)
	router := startProxyTo(t, worker.URL)
	tests := []struct {
		mode       string
		wantStatus int
		wantBody   string
		wantSized  bool
	}{
		{"small", 200, `{"ok":true}`, true},
		{"big", 200, big, true},
		{"unsized", 200, "part;part;part;", false},
		{"sse", 200, "data: 1\n\ndata: 2\n\ndata: [DONE]\n\n", false},
		{"broken", 502, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.mode, func(t *testing.T) {
			resp, err := http.Post(router+"/v1/completions", "application/json", strings.NewReader(`{"model":"m","prompt":"`+tt.mode+`"}`))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatalf("read: %v", err)
			}
			if resp.StatusCode != tt.wantStatus {
				t.Fatalf("status %d (%s), want %d", resp.StatusCode, body, tt.wantStatus)
			}
			if tt.wantStatus == 200 && string(body) != tt.wantBody {
				t.Fatalf("body %d bytes, want %d bytes", len(body), len(tt.wantBody))
			}
			if sized := resp.ContentLength >= 0; sized != tt.wantSized {
				t.Errorf("content-length %d, want sized=%v", resp.ContentLength, tt.wantSized)
			}
			if resp.Header.Get("X-Request-Id") == "" {
				t.Error("no X-Request-Id on the response")
			}
		})
	}
}

// TestMaxConnections: connections beyond the limit are refused with a 503
// instead of being read (and their bodies buffered).
func TestMaxConnections(t *testing.T) {
	addr := startServer(t, Config{MaxConnections: 1})
	first, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	// The first connection holds the only slot once the server took it.
	if _, err := io.WriteString(first, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(first), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	second, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	_ = second.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(second, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err = http.ReadResponse(bufio.NewReader(second), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("second connection got %d, want 503", resp.StatusCode)
	}
}

// TestInvocationPathAliases: the paths the managed offering's manifests
// name as their invocationEndpoint reach the worker as the OpenAI paths
// vLLM serves: /completions and /chat/completions without the /v1 prefix,
// and SageMaker's /invocations (a chat when the body has messages, as
// vLLM's own /invocations decides).
func TestInvocationPathAliases(t *testing.T) {
	seen := make(chan string, 1)
	worker := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.URL.Path
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"ok":true}`)
	}))
	t.Cleanup(worker.Close)
	router := startProxyTo(t, worker.URL)
	completion, chat := `{"model":"m","prompt":"p"}`, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	for _, tt := range []struct{ path, body, want string }{
		{"/completions", completion, "/v1/completions"},
		{"/chat/completions", chat, "/v1/chat/completions"},
		{"/invocations", chat, "/v1/chat/completions"},
		{"/invocations", completion, "/v1/completions"},
		{"/v1/completions", completion, "/v1/completions"},
	} {
		resp, err := http.Post(router+tt.path, "application/json", strings.NewReader(tt.body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("POST %s: %d %s", tt.path, resp.StatusCode, b)
			continue
		}
		if got := <-seen; got != tt.want {
			t.Errorf("POST %s reached the worker as %s, want %s", tt.path, got, tt.want)
		}
	}
}

// TestModelsNotYetKnown: a worker passes its health check a moment before
// its model list is fetched. In that moment the router is not ready (a
// readiness probe keeps traffic away), and a request it is sent anyway is
// told to retry (503), never that its model does not exist (404).
func TestModelsNotYetKnown(t *testing.T) {
	p := pool.New()
	const worker = "http://127.0.0.1:9" // never dialled: nothing is routed
	p.Update([]discovery.Target{{URL: worker}})
	ep := p.Get(worker)
	ep.SetHealthy(true, time.Now())
	s, err := strategy.New(strategy.Defaults())
	if err != nil {
		t.Fatal(err)
	}
	lim := limiter.New(limiter.Config{})
	srv := New(Config{}, Deps{Pool: p, Limiter: lim, Metrics: metrics.New(prometheus.NewRegistry(), p, lim.Stats), Routing: &Routing{Strategy: s}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Shutdown(time.Second) })
	base := "http://" + ln.Addr().String()

	status := func(method, path, body string) int {
		t.Helper()
		req, err := http.NewRequest(method, base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK && !gjson.GetBytes(mustRead(t, resp.Body), "error.message").Exists() {
			t.Errorf("%s %s: status %d without an OpenAI error body", method, path, resp.StatusCode)
		}
		return resp.StatusCode
	}
	const completion = `{"model":"m","prompt":"hello"}`
	if got := status(http.MethodGet, "/ready", ""); got != http.StatusServiceUnavailable {
		t.Errorf("/ready with no worker's models known: %d, want 503", got)
	}
	if got := status(http.MethodPost, "/v1/completions", completion); got != http.StatusServiceUnavailable {
		t.Errorf("completion with no worker's models known: %d, want 503", got)
	}
	ep.SetModels([]string{"m"})
	if got := status(http.MethodGet, "/ready", ""); got != http.StatusOK {
		t.Errorf("/ready once the models are known: %d, want 200", got)
	}
	if got := status(http.MethodPost, "/v1/completions", `{"model":"other","prompt":"hello"}`); got != http.StatusNotFound {
		t.Errorf("a model no worker serves, once the models are known: %d, want 404", got)
	}
}

func mustRead(t *testing.T, r io.Reader) []byte {
	t.Helper()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
