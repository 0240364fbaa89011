// Package router tests the router as a black box: its binary in front of
// vllm-sim worker processes on loopback, driven over HTTP and observed
// through its own /metrics, /debug/endpoints and /debug/config.
package router

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/warmpath/warmpath/libs/testnet"
	"github.com/warmpath/warmpath/tests/harness"
)

const (
	simPkg    = "github.com/warmpath/warmpath/tools/cmd/vllm-sim"
	routerPkg = "github.com/warmpath/warmpath/services/router/cmd/router"
	simModel  = "sim-model"
)

func TestMain(m *testing.M) {
	// Every simulated worker hashes blocks from the same seed, as vLLM
	// workers of one deployment do (the L2 test's chunk hashes assume 0).
	if err := os.Setenv("PYTHONHASHSEED", "0"); err != nil {
		panic(err)
	}
	harness.Main(m)
}

// worker is a vllm-sim process on loopback (proc nil: a spy in front of one).
type worker struct {
	url  string
	proc *harness.Process
}

// startWorker runs vllm-sim with args added to the defaults and waits for
// /health. The process is killed when the test ends.
func startWorker(t *testing.T, args ...string) *worker {
	t.Helper()
	return startWorkerOn(t, testnet.FreePort(t), args...)
}

// startWorkerOn is startWorker on a given port.
func startWorkerOn(t *testing.T, port int, args ...string) *worker {
	t.Helper()
	all := append([]string{"--host", "127.0.0.1", "--port", strconv.Itoa(port), "--model", simModel,
		"--time-scale", "20", "--max-model-len", "16384", "--num-gpu-blocks-override", "4096", "--log-level", "warn"}, args...)
	w := &worker{url: fmt.Sprintf("http://127.0.0.1:%d", port), proc: harness.StartProcess(t.Context(), t, harness.Binary(t, simPkg), all...)}
	waitUp(t, w.proc, http.DefaultClient, w.url+"/health")
	return w
}

// waitUp waits until url answers 200, failing the test if p exits first.
func waitUp(t *testing.T, p *harness.Process, c *http.Client, url string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		select {
		case <-p.Done():
			t.Fatalf("the process serving %s exited before answering (its output follows)", url)
		default:
		}
		resp, err := c.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not up after 15s: %v", url, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (w *worker) kill() {
	if w.proc != nil {
		w.proc.Kill()
	}
}

// metric sums the samples of one family in the worker's /metrics.
func (w *worker) metric(t *testing.T, name string) float64 {
	t.Helper()
	return scrape(t, w.url+"/metrics", name)
}

func scrape(t *testing.T, url, name string) float64 {
	t.Helper()
	body := getBody(t, http.DefaultClient, url)
	// name may carry leading labels, e.g. `x_total{code="504"`: labels
	// are exposed in sorted order, so a prefix match selects the series
	// (harness.SumSamples wants every label).
	prefixes := []string{name + "{", name + " "}
	if strings.Contains(name, "{") {
		prefixes = []string{strings.TrimSuffix(name, "}")}
	}
	var sum float64
	for _, line := range strings.Split(string(body), "\n") {
		match := false
		for _, p := range prefixes {
			match = match || strings.HasPrefix(line, p)
		}
		if !match {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("parse %q: %v", line, err)
		}
		sum += v
	}
	return sum
}

// router is a router process on loopback.
type router struct {
	url    string
	client *http.Client // trusts the router's certificate, when it serves TLS
	proc   *harness.Process
}

// startRouter runs the router over workers with args after the defaults
// below (a flag given twice takes its last value) and waits until every worker
// is ready. The process is killed when the test ends.
func startRouter(t *testing.T, workers []*worker, args ...string) *router {
	t.Helper()
	return startRouterOn(t, "http", http.DefaultClient, workers, args...)
}

// startRouterOn is startRouter reached with scheme and client (https and a
// client trusting its certificate, for a router serving TLS).
func startRouterOn(t *testing.T, scheme string, client *http.Client, workers []*worker, args ...string) *router {
	t.Helper()
	return startRouterAt(t, scheme, client, "127.0.0.1:"+strconv.Itoa(testnet.FreePort(t)), workers, args...)
}

// startRouterAt is startRouterOn listening on addr (replicas that must
// know each other's addresses before they start).
func startRouterAt(t *testing.T, scheme string, client *http.Client, addr string, workers []*worker, args ...string) *router {
	t.Helper()
	urls := make([]string, len(workers))
	for i, w := range workers {
		urls[i] = w.url
	}
	// Fast probes and short ejections, so the tests see workers come and
	// go within a second.
	all := append([]string{"--listen", addr, "--workers", strings.Join(urls, ","),
		"--log-level", "warn", "--log-format", "text",
		"--health-interval", "50ms", "--scrape-interval", "50ms", "--probe-timeout", "1s",
		"--eject-after", "3", "--eject-base", "200ms", "--eject-max", "1s", "--eject-max-percent", "50",
		"--shutdown-grace", "5s"}, args...)
	r := &router{url: scheme + "://" + addr, client: client, proc: harness.StartProcess(t.Context(), t, harness.Binary(t, routerPkg), all...)}
	waitUp(t, r.proc, client, r.url+"/health")
	r.waitWorkers(t, len(workers))
	return r
}

// shutdown stops the router as Kubernetes does, with SIGTERM, and waits
// for it to exit.
func shutdown(t *testing.T, r *router) {
	t.Helper()
	if err := r.proc.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	select {
	case <-r.proc.Done():
	case <-time.After(15 * time.Second):
		t.Fatal("router still running 15s after SIGTERM")
	}
	if err := r.proc.Wait(); err != nil {
		t.Errorf("router exit: %v", err)
	}
}

// endpoint is one worker in /debug/endpoints.
type endpoint = harness.RouterEndpoint

// endpoints reads /debug/endpoints.
func (r *router) endpoints(t *testing.T) []endpoint {
	t.Helper()
	eps, err := harness.RouterEndpoints(context.Background(), r.client, r.url)
	if err != nil {
		t.Fatal(err)
	}
	return eps
}

// endpoint is the worker at url in /debug/endpoints.
func (r *router) endpoint(t *testing.T, url string) endpoint {
	t.Helper()
	eps := r.endpoints(t)
	if i := slices.IndexFunc(eps, func(e endpoint) bool { return e.URL == url }); i >= 0 {
		return eps[i]
	}
	t.Fatalf("/debug/endpoints lacks %s", url)
	return endpoint{}
}

// inFlight is each worker's requests in flight at the router, from
// /debug/endpoints; it does not fail the test, so samplers may call it
// from their own goroutines.
func (r *router) inFlight() (map[string]int, error) {
	eps, err := harness.RouterEndpoints(context.Background(), r.client, r.url)
	if err != nil {
		return nil, err
	}
	out := make(map[string]int, len(eps))
	for _, ep := range eps {
		out[ep.URL] = ep.InFlight
	}
	return out, nil
}

// waitWorkers waits until n workers are available with known models.
func (r *router) waitWorkers(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ready := 0
		for _, ep := range r.endpoints(t) {
			if ep.InRotation() && slices.Contains(ep.Models, simModel) && ep.NumGPUBlocks > 0 {
				ready++
			}
		}
		if ready >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d workers ready after 10s", ready, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// get GETs path from the router and returns the body of its 200.
func (r *router) get(t *testing.T, path string) []byte {
	t.Helper()
	return getBody(t, r.client, r.url+path)
}

// getBody GETs url with c and returns the body of its 200.
func getBody(t *testing.T, c *http.Client, url string) []byte {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v %s", url, resp.StatusCode, err, b)
	}
	return b
}

func post(t *testing.T, url, body string, headers ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// serveSpy serves h on loopback and returns it as a worker.
func serveSpy(t *testing.T, h *http.Server) *worker {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = h.Serve(ln) }()
	t.Cleanup(func() { _ = h.Close() })
	return &worker{url: "http://" + ln.Addr().String()}
}

// proxyTo forwards req to target (a minimal pass-through for the spy).
func proxyTo(rw http.ResponseWriter, req *http.Request, target string) {
	out, err := http.NewRequestWithContext(req.Context(), req.Method, target+req.URL.RequestURI(), req.Body)
	if err != nil {
		http.Error(rw, err.Error(), http.StatusBadGateway)
		return
	}
	out.Header = req.Header.Clone()
	resp, err := http.DefaultTransport.RoundTrip(out)
	if err != nil {
		http.Error(rw, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, vv := range resp.Header {
		for _, v := range vv {
			rw.Header().Add(k, v)
		}
	}
	rw.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(rw, resp.Body)
}
