package app

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/warmpath/warmpath/services/router/internal/discovery"
	"github.com/warmpath/warmpath/services/router/internal/limiter"
	"github.com/warmpath/warmpath/services/router/internal/probe"
	"github.com/warmpath/warmpath/services/router/internal/proxy"
	"github.com/warmpath/warmpath/services/router/strategy"
)

const simModel = "sim-model"

var (
	simOnce sync.Once
	simBin  string
	simErr  error
)

// simBinary builds tools/cmd/vllm-sim once per test binary: the router is
// tested against the real simulator process, not a stand-in.
func simBinary(t *testing.T) string {
	t.Helper()
	simOnce.Do(func() {
		dir, err := os.MkdirTemp("", "router-test-sim")
		if err != nil {
			simErr = err
			return
		}
		simBin = filepath.Join(dir, "vllm-sim")
		cmd := exec.Command("go", "build", "-o", simBin, "github.com/warmpath/warmpath/tools/cmd/vllm-sim")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			simErr = fmt.Errorf("build vllm-sim: %v\n%s", err, out)
		}
	})
	if simErr != nil {
		t.Fatal(simErr)
	}
	return simBin
}

// worker is a vllm-sim process on loopback.
type worker struct {
	url  string
	cmd  *exec.Cmd
	done chan struct{}
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startWorker runs vllm-sim with args added to the defaults and waits for
// /health. The process is killed when the test ends.
func startWorker(t *testing.T, args ...string) *worker {
	t.Helper()
	return startWorkerOn(t, freePort(t), args...)
}

// startWorkerOn is startWorker on a given port.
func startWorkerOn(t *testing.T, port int, args ...string) *worker {
	t.Helper()
	all := append([]string{"--host", "127.0.0.1", "--port", strconv.Itoa(port), "--model", simModel,
		"--time-scale", "20", "--max-model-len", "16384", "--num-gpu-blocks-override", "4096", "--log-level", "warn"}, args...)
	cmd := exec.Command(simBinary(t), all...)
	cmd.Env = append(os.Environ(), "PYTHONHASHSEED=0")
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w := &worker{url: fmt.Sprintf("http://127.0.0.1:%d", port), cmd: cmd, done: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			t.Logf("sim %d: %s", port, sc.Text())
		}
	}()
	go func() { _ = cmd.Wait(); close(w.done) }()
	t.Cleanup(w.kill)
	deadline := time.Now().Add(15 * time.Second)
	for {
		select {
		case <-w.done:
			t.Fatalf("vllm-sim on %d exited before becoming healthy (see its log above)", port)
		default:
		}
		resp, err := http.Get(w.url + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return w
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("vllm-sim on %d not healthy: %v", port, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (w *worker) kill() {
	if w.cmd == nil {
		return
	}
	select {
	case <-w.done:
		return
	default:
	}
	_ = w.cmd.Process.Signal(syscall.SIGKILL)
	<-w.done
}

// metric sums the samples of one family in the worker's /metrics.
func (w *worker) metric(t *testing.T, name string) float64 {
	t.Helper()
	return scrape(t, w.url+"/metrics", name)
}

func scrape(t *testing.T, url, name string) float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	// name may carry leading labels, e.g. `x_total{code="504"`: labels
	// are exposed in sorted order, so a prefix match selects the series.
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

// router is an in-process router on loopback.
type router struct {
	app  *App
	url  string
	stop func() error
}

// shutdown stops the router as SIGTERM would and waits for Run to return.
func shutdown(t *testing.T, r *router) {
	t.Helper()
	if err := r.stop(); err != nil {
		t.Errorf("router Run: %v", err)
	}
}

type routerOpt func(*Options)

func startRouter(t *testing.T, workers []*worker, opts ...routerOpt) *router {
	t.Helper()
	urls := make([]string, len(workers))
	for i, w := range workers {
		urls[i] = w.url
	}
	src, err := discovery.Static(urls)
	if err != nil {
		t.Fatal(err)
	}
	o := Options{
		Discovery: src,
		Routing:   strategy.Defaults(),
		Limits:    limiter.Config{MaxQueue: 1024},
		Proxy:     proxy.Config{MaxRetries: 2, PanicPercent: 50}, // as cmd/router's flags
		Probe:     probe.Config{HealthInterval: 50 * time.Millisecond, ScrapeInterval: 50 * time.Millisecond, Timeout: time.Second},
	}
	o.Proxy.Ejection.ConsecutiveFailures = 3
	o.Proxy.Ejection.BaseDuration = 200 * time.Millisecond
	o.Proxy.Ejection.MaxDuration = time.Second
	o.Proxy.Ejection.MaxEjectedPercent = 50
	for _, f := range opts {
		f(&o)
	}
	ctx, cancel := context.WithCancel(context.Background())
	a, err := New(ctx, o)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx, ln, 5*time.Second) }()
	var once sync.Once
	var runErr error
	scheme := "http://"
	if o.TLS != nil {
		scheme = "https://"
	}
	r := &router{app: a, url: scheme + ln.Addr().String(), stop: func() error {
		once.Do(func() {
			cancel()
			runErr = <-done
		})
		return runErr
	}}
	t.Cleanup(func() { shutdown(t, r) })
	r.waitWorkers(t, len(workers))
	return r
}

// waitWorkers waits until n workers are healthy with known models.
func (r *router) waitWorkers(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ready := 0
		for _, ep := range r.app.Pool().All() {
			if ep.Available() && ep.Serves(simModel) && ep.Stats().NumGPUBlocks > 0 {
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
	return &worker{url: "http://" + ln.Addr().String(), done: make(chan struct{})}
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
