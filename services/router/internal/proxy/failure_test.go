package proxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/tidwall/gjson"

	"github.com/warmpath/warmpath/libs/openai"
	"github.com/warmpath/warmpath/libs/testwait"
	"github.com/warmpath/warmpath/services/router/internal/discovery"
	"github.com/warmpath/warmpath/services/router/internal/limiter"
	"github.com/warmpath/warmpath/services/router/internal/metrics"
	"github.com/warmpath/warmpath/services/router/internal/pool"
	"github.com/warmpath/warmpath/services/router/strategy"
)

// fleet is a router in front of httptest workers, all serving model "m",
// routed round robin so every test knows where requests go.
type fleet struct {
	url     string
	srv     *Server
	pool    *pool.Pool
	metrics *metrics.Metrics
	workers []*testWorker
}

// testWorker is an httptest worker that counts the requests it received
// whole.
type testWorker struct {
	*httptest.Server
	handler http.HandlerFunc // set before the first request
	hits    atomic.Int64
}

// productionConfig is the proxy configuration the router's flags default
// to (cmd/router), so tests see what an operator gets.
func productionConfig() Config {
	return Config{
		MaxRetries:   2,
		PanicPercent: 50,
		Ejection: pool.Ejection{
			ConsecutiveFailures: 3, BaseDuration: time.Minute, MaxDuration: time.Minute, MaxEjectedPercent: 50,
		},
	}
}

// startFleet serves a router with cfg in front of one worker per handler.
func startFleet(t *testing.T, cfg Config, handlers ...http.HandlerFunc) *fleet {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return startFleetOn(t, ln, cfg, handlers...)
}

// startFleetOn is startFleet serving on ln.
func startFleetOn(t *testing.T, ln net.Listener, cfg Config, handlers ...http.HandlerFunc) *fleet {
	t.Helper()
	return startFleetWith(t, ln, cfg, fleetOptions{}, handlers...)
}

// fleetOptions change what startFleetWith builds the router with.
type fleetOptions struct {
	strategy strategy.Strategy // nil: round robin
	log      *slog.Logger      // nil: discarded
}

// startFleetWith is startFleetOn with a strategy and logger of the test's.
func startFleetWith(t *testing.T, ln net.Listener, cfg Config, o fleetOptions, handlers ...http.HandlerFunc) *fleet {
	t.Helper()
	f := &fleet{pool: pool.New()}
	for range handlers {
		w := &testWorker{}
		w.Server = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			body, err := io.ReadAll(r.Body)
			if err != nil {
				return
			}
			w.hits.Add(1)
			r.Body = io.NopCloser(bytes.NewReader(body))
			w.handler(rw, r)
		}))
		t.Cleanup(w.Close)
		f.workers = append(f.workers, w)
	}
	// Handlers go to workers in URL order, the order round robin takes
	// them in from the first request on.
	sort.Slice(f.workers, func(i, j int) bool { return f.workers[i].URL < f.workers[j].URL })
	var targets []discovery.Target
	for i, w := range f.workers {
		w.handler = handlers[i]
		targets = append(targets, discovery.Target{URL: w.URL})
	}
	f.pool.Update(targets)
	for _, ep := range f.pool.All() {
		ep.SetHealthy(true, time.Now())
		ep.SetModels([]string{"m"})
	}
	s := o.strategy
	if s == nil {
		sc := strategy.Defaults()
		sc.Name = strategy.NameRoundRobin
		var err error
		if s, err = strategy.New(sc); err != nil {
			t.Fatal(err)
		}
	}
	lim := limiter.New(limiter.Config{})
	f.metrics = metrics.New(prometheus.NewRegistry(), f.pool, lim.Stats)
	f.srv = New(cfg, Deps{Pool: f.pool, Limiter: lim, Metrics: f.metrics, Log: o.log, Routing: &Routing{Strategy: s}})
	go func() { _ = f.srv.Serve(ln) }()
	t.Cleanup(func() { f.srv.Shutdown(time.Second) })
	f.url = "http://" + ln.Addr().String()
	return f
}

// post sends a completion request with prompt and returns the status.
func (f *fleet) post(t *testing.T, prompt string) int {
	t.Helper()
	resp, err := http.Post(f.url+"/v1/completions", "application/json",
		strings.NewReader(fmt.Sprintf(`{"model":"m","prompt":%q,"max_tokens":1}`, prompt)))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

func (f *fleet) hits() (n int64) {
	for _, w := range f.workers {
		n += w.hits.Load()
	}
	return n
}

func (f *fleet) ejected() (n int) {
	for _, ep := range f.pool.All() {
		if ep.Ejected() {
			n++
		}
	}
	return n
}

// poisoned answers 500 to the prompt "poison" and 200 to the rest, as a
// worker does for a request that trips a bug in the engine.
func poisoned(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	if gjson.GetBytes(b, "prompt").String() == "poison" {
		http.Error(w, `{"error":{"message":"engine error"}}`, http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"choices":[{"text":"ok"}]}`)
}

func ok(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"choices":[{"text":"ok"}]}`)
}

// TestBadRequestsDoNotEjectTheFleet: requests that fail on every worker
// they reach are the request's fault, and ejection never takes more than
// its share of a model's workers out, so healthy requests keep flowing.
func TestBadRequestsDoNotEjectTheFleet(t *testing.T) {
	tests := []struct {
		name    string
		retryOn RetryOn
		poison  int
		// wantEjected is the most workers that may be out afterwards.
		wantEjected int
	}{
		// Each poison request is retried on all three workers and fails
		// everywhere: nobody is at fault but the request.
		{"retried everywhere", RetryOn{FailConnect, FailRefused, Fail5xx}, 3, 0},
		// Not retried (the default): each worker sees 500s in a row, but
		// at most half of the three (one) may be ejected.
		{"not retried", nil, 12, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := productionConfig()
			cfg.RetryOn = tt.retryOn
			f := startFleet(t, cfg, poisoned, poisoned, poisoned)
			for i := range tt.poison {
				if got := f.post(t, "poison"); got < 500 {
					t.Fatalf("poison request %d: %d, want a 5xx", i, got)
				}
			}
			if got := f.ejected(); got > tt.wantEjected {
				t.Fatalf("%d of 3 workers ejected by %d bad requests, want at most %d", got, tt.poison, tt.wantEjected)
			}
			for i := range 6 {
				if got := f.post(t, "hello"); got != http.StatusOK {
					t.Fatalf("healthy request %d: %d after bad requests, want 200", i, got)
				}
			}
		})
	}
}

// TestRequestFaultCounted: a request that failed on every worker it
// reached moves warmpath_router_request_faults_total, and a failure on
// one worker but success on another still counts against the first.
func TestRequestFaultCounted(t *testing.T) {
	cfg := productionConfig()
	cfg.RetryOn = RetryOn{Fail5xx}
	cfg.Ejection.ConsecutiveFailures = 1
	var calls atomic.Int64
	flaky := func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			http.Error(w, "first call fails", http.StatusInternalServerError)
			return
		}
		ok(w, r)
	}
	f := startFleet(t, cfg, flaky, flaky)
	if got := f.post(t, "x"); got != http.StatusOK {
		t.Fatalf("status %d, want 200 from the second worker", got)
	}
	if f.ejected() != 1 {
		t.Fatalf("%d workers ejected, want the one that failed a request another served", f.ejected())
	}
	if got := testutil.ToFloat64(f.metrics.RequestFaults); got != 0 {
		t.Fatalf("request_faults_total = %v, want 0", got)
	}
}

// TestPanicRouting: when fewer than PanicPercent of a model's workers are
// healthy, requests go to all of them; with panic mode off, only to the
// healthy ones.
func TestPanicRouting(t *testing.T) {
	for _, panicPercent := range []int{50, 0} {
		t.Run(fmt.Sprintf("threshold %d%%", panicPercent), func(t *testing.T) {
			cfg := productionConfig()
			cfg.PanicPercent = panicPercent
			f := startFleet(t, cfg, ok, ok, ok, ok)
			// Health checks fail for three of four (say, a broken probe
			// path): 25% healthy.
			for _, ep := range f.pool.All()[1:] {
				ep.SetHealthy(false, time.Now())
			}
			for i := range 8 {
				if got := f.post(t, "hello"); got != http.StatusOK {
					t.Fatalf("request %d: %d, want 200", i, got)
				}
			}
			first := f.workers[0].hits.Load()
			panicked := testutil.ToFloat64(f.metrics.PanicRouted)
			if panicPercent > 0 && (first == 8 || panicked != 8) {
				t.Fatalf("panic mode: %d of 8 requests at the healthy worker, %v counted as panic-routed; want them spread and 8", first, panicked)
			}
			if panicPercent == 0 && (first != 8 || panicked != 0) {
				t.Fatalf("no panic mode: %d of 8 requests at the healthy worker, %v panic-routed; want 8 and 0", first, panicked)
			}
		})
	}
}

// hangUp reads the whole request, then closes the connection without an
// answer, as a worker process killed by the request would.
func hangUp(w http.ResponseWriter, _ *http.Request) {
	c, _, err := http.NewResponseController(w).Hijack()
	if err == nil {
		_ = c.Close()
	}
}

// TestRetryPolicy: by default only what cannot have run on a worker is
// sent to another; a reset after the request was sent and a plain 5xx
// are retried only when --retry-on names them.
func TestRetryPolicy(t *testing.T) {
	refuse := func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Retry-After", "1")
		http.Error(w, "busy", http.StatusServiceUnavailable)
	}
	unavailable := func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "engine dead", http.StatusServiceUnavailable)
	}
	tests := []struct {
		name     string
		retryOn  RetryOn
		handlers []http.HandlerFunc
		want     int
		wantHits int64
	}{
		{"reset after send is not re-sent", nil, []http.HandlerFunc{hangUp, hangUp, hangUp}, http.StatusBadGateway, 1},
		{"reset re-sent when opted in", RetryOn{FailReset}, []http.HandlerFunc{hangUp, hangUp, hangUp}, http.StatusBadGateway, 3},
		{"503 with Retry-After is retried", nil, []http.HandlerFunc{refuse, refuse, ok}, http.StatusOK, 3},
		{"503 without Retry-After is passed on", nil, []http.HandlerFunc{unavailable, ok, ok}, http.StatusServiceUnavailable, 1},
		{"5xx retried when opted in", RetryOn{Fail5xx}, []http.HandlerFunc{unavailable, ok, ok}, http.StatusOK, 2},
		{"refusals everywhere reach the client", nil, []http.HandlerFunc{refuse, refuse, refuse}, http.StatusServiceUnavailable, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := productionConfig()
			cfg.RetryOn = tt.retryOn
			f := startFleet(t, cfg, tt.handlers...)
			if got := f.post(t, "hello"); got != tt.want {
				t.Fatalf("status %d, want %d", got, tt.want)
			}
			if got := f.hits(); got != tt.wantHits {
				t.Fatalf("the request reached workers %d times, want %d", got, tt.wantHits)
			}
		})
	}
}

// TestConnectFailureRetried: a worker that cannot be reached is skipped by
// default; when none can be, the client gets 503, as Envoy answers.
func TestConnectFailureRetried(t *testing.T) {
	f := startFleet(t, productionConfig(), ok, ok)
	// The first worker round robin picks is gone.
	f.workers[0].Close()
	for i := range 4 {
		if got := f.post(t, "hello"); got != http.StatusOK {
			t.Fatalf("request %d: %d, want 200 from the live worker", i, got)
		}
	}
	f.workers[1].Close()
	if got := f.post(t, "hello"); got != http.StatusServiceUnavailable {
		t.Fatalf("every worker unreachable: %d, want 503", got)
	}
}

// TestTTFBTimeoutNotRetried: a worker that holds the request past the
// TTFB timeout has it, so the client gets 504 and no other worker sees it.
func TestTTFBTimeoutNotRetried(t *testing.T) {
	release := make(chan struct{})
	stall := func(http.ResponseWriter, *http.Request) { <-release }
	cfg := productionConfig()
	cfg.RetryOn = RetryOn{FailConnect, FailRefused, FailReset, Fail5xx}
	cfg.TTFBTimeout = 200 * time.Millisecond
	f := startFleet(t, cfg, stall, stall)
	// Registered after the workers', so it runs first and lets them close.
	t.Cleanup(func() { close(release) })
	if got := f.post(t, "hello"); got != http.StatusGatewayTimeout {
		t.Fatalf("status %d, want 504", got)
	}
	if got := f.hits(); got != 1 {
		t.Fatalf("reached workers %d times, want 1", got)
	}
}

// TestTTFBTimeoutRetriedWhenOptedIn: with --retry-on timeout, a request
// whose worker sends no byte within TTFBTimeout goes to another worker, as
// a hung worker's requests must; the last attempt still answers 504.
func TestTTFBTimeoutRetriedWhenOptedIn(t *testing.T) {
	for _, tt := range []struct {
		name     string
		stalls   int // of three workers, in round-robin order
		want     int
		wantHits int64
	}{
		{"a stalled worker's request answered by another", 1, http.StatusOK, 2},
		{"stalled everywhere is a 504 after every attempt", 3, http.StatusGatewayTimeout, 3},
	} {
		t.Run(tt.name, func(t *testing.T) {
			release := make(chan struct{})
			stall := func(http.ResponseWriter, *http.Request) { <-release }
			handlers := []http.HandlerFunc{ok, ok, ok}
			for i := range tt.stalls {
				handlers[i] = stall
			}
			cfg := productionConfig()
			cfg.RetryOn = RetryOn{FailConnect, FailRefused, FailTimeout}
			cfg.TTFBTimeout = 200 * time.Millisecond
			f := startFleet(t, cfg, handlers...)
			// Registered after the workers', so it runs first and lets them close.
			t.Cleanup(func() { close(release) })
			if got := f.post(t, "hello"); got != tt.want {
				t.Fatalf("status %d, want %d", got, tt.want)
			}
			if got := f.hits(); got != tt.wantHits {
				t.Fatalf("reached workers %d times, want %d", got, tt.wantHits)
			}
		})
	}
	if r, err := ParseRetryOn("connect-failure,timeout"); err != nil || !r.Has(FailTimeout) {
		t.Errorf("ParseRetryOn(connect-failure,timeout) = %v, %v; want timeout in it", r, err)
	}
}

// TestSlowClientReleasesConnection: a client that sends a request and
// never reads the answer cannot hold the connection past WriteTimeout.
func TestSlowClientReleasesConnection(t *testing.T) {
	body := strings.Repeat("x", 900<<10) // sized and under bufferLimit: not streamed
	big := func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", fmt.Sprint(len(body)))
		_, _ = io.WriteString(w, body)
	}
	cfg := productionConfig()
	cfg.WriteTimeout = 300 * time.Millisecond
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// Small socket buffers at both ends, so the answer cannot all sit in
	// the kernel: the router's write blocks, as it does for a real client
	// on a slow link.
	f := startFleetOn(t, smallSendBuffers{ln}, cfg, big)
	nc, err := net.Dial("tcp", strings.TrimPrefix(f.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.(*net.TCPConn).SetReadBuffer(4 << 10); err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	req := `{"model":"m","prompt":"hello"}`
	if _, err := fmt.Fprintf(nc, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(req), req); err != nil {
		t.Fatal(err)
	}
	// The client reads nothing. The router's write must give up and close.
	testwait.For(t, 10*time.Second, "the router to close a connection whose client stopped reading", func() bool {
		return f.srv.hs.GetOpenConnectionsCount() == 0
	})
}

// smallSendBuffers gives every accepted connection a 4 KiB send buffer,
// which also stops the kernel growing it.
type smallSendBuffers struct{ net.Listener }

func (l smallSendBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(4 << 10)
	}
	return c, nil
}

// TestBrokenStreamEndsWithErrorEvent: when a worker's event stream breaks
// or stalls after the status was sent, the client gets every whole event
// the worker sent, never a part of one, then an OpenAI-style error event
// and [DONE], as vLLM ends a stream its engine failed; so a client library
// reports an error instead of a truncated answer it takes for complete.
func TestBrokenStreamEndsWithErrorEvent(t *testing.T) {
	hangUp := func(w http.ResponseWriter) {
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			_ = conn.Close()
		}
	}
	tests := []struct {
		mode     string
		sent     []string // what the worker writes, each flushed
		after    func(http.ResponseWriter)
		wantHead string
		wantCode int
	}{
		{"broken between events", []string{"data: 1\n\n", "data: 2\n\n"}, hangUp, "data: 1\n\ndata: 2\n\n", 502},
		{"broken within an event", []string{"data: 1\n\n", `data: {"choices":[{"te`}, hangUp, "data: 1\n\n", 502},
		{"broken within an event split over writes", []string{"data: 1\n", "\ndata: 2", "\n"}, hangUp, "data: 1\n\n", 502},
		{"stalled", []string{"data: 1\n\n", "data: 2"}, func(http.ResponseWriter) { time.Sleep(time.Second) }, "data: 1\n\n", 504},
	}
	for _, tt := range tests {
		t.Run(tt.mode, func(t *testing.T) {
			worker := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				for _, b := range tt.sent {
					_, _ = io.WriteString(w, b)
					w.(http.Flusher).Flush()
					time.Sleep(10 * time.Millisecond)
				}
				tt.after(w)
			}))
			t.Cleanup(worker.Close)
			router := startProxyWith(t, worker.URL, Config{IdleTimeout: 300 * time.Millisecond})
			resp, err := http.Post(router+"/v1/completions", "application/json", strings.NewReader(`{"model":"m","prompt":"p","stream":true}`))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatalf("read after %q: %v (the stream must end cleanly)", body, err)
			}
			rest, ok := strings.CutPrefix(string(body), tt.wantHead)
			if !ok {
				t.Fatalf("body %q, want it to start with the whole events %q", body, tt.wantHead)
			}
			event, ok := strings.CutSuffix(rest, "data: [DONE]\n\n")
			if !ok {
				t.Fatalf("body %q does not end with [DONE]", body)
			}
			payload, ok := strings.CutPrefix(event, "data: ")
			if !ok || !strings.HasSuffix(payload, "\n\n") {
				t.Fatalf("after the whole events %q, want one error event, then [DONE]", rest)
			}
			var v openai.ErrorResponse
			if err := json.Unmarshal([]byte(payload), &v); err != nil || v.Error.Code != tt.wantCode || v.Error.Message == "" {
				t.Fatalf("error event %q: %+v, %v; want code %d", payload, v, err, tt.wantCode)
			}
		})
	}
}
