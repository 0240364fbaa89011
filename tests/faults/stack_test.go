// Package faults runs the router in front of three simulated vLLM workers,
// each in its own container on one Docker network, under a steady open-loop
// load of streamed and non-streamed completions, and injects one fault per
// test: a worker killed, a worker hung (paused), the router restarted, the
// Redis holding kvaware's shared index stopped (redis_test.go), a worker
// restarted with its event stream (events_test.go), its event messages
// dropped and reordered by a relay (eventloss_test.go), hostile event
// peers, and the whole stack with the workers' cache node killed
// (fullstack_test.go). Each test asserts what docs/router.md's failure
// model promises and records its counts in bench/results/faults.json
// (docs/reliability.md). The cache server's scenarios (cache*_test.go) run
// it alone or two in cluster mode, with the test or the workers as the
// client: killed mid-writes, partitioned, hostile clients.
package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warmpath/warmpath/tests/harness"
)

const (
	routerPkg = "github.com/warmpath/warmpath/services/router/cmd/router"
	simPkg    = "github.com/warmpath/warmpath/tools/cmd/vllm-sim"
	model     = "meta-llama/Llama-3.1-8B-Instruct"
	// idleTimeout is the router's --idle-timeout: a stream whose worker
	// went silent ends within it.
	idleTimeout = 5 * time.Second
	// probeInterval is the router's --health-interval and --probe-timeout.
	probeInterval = time.Second
)

func TestMain(m *testing.M) { harness.Main(m) }

// stack is a router and its workers on one network.
type stack struct {
	router *harness.Container
	// base is the router's current base URL from the host; a restart may
	// publish it on another port.
	base atomic.Pointer[string]
	// workers maps each worker's URL, as the router names it, to its
	// container.
	workers map[string]*harness.Container
	urls    []string
	// mem samples every container's memory for the scenario's record.
	mem *memSampler
	// proxy, with stackOpts.eventProxy, stands under the first worker's
	// name between it and the router (eventproxy).
	proxy *harness.Container
}

// record is record with the peak memory of the stack's containers.
func (s *stack) record(t *testing.T, name string, sc *scenario) {
	sc.peaks = s.mem.snapshot
	record(t, name, sc)
}

// startStack starts three workers with KV events on and a kvaware router
// subscribed to them, with short probes and stream idle timeout, plus
// extra router flags; it returns once the router sees every worker healthy.
func startStack(t *testing.T, extra ...string) *stack {
	t.Helper()
	return startStackOn(t, harness.NewNetwork(t), extra...)
}

// startStackOn is startStack on nw, where the test may have started the
// router's other peers.
func startStackOn(t *testing.T, nw *harness.Network, extra ...string) *stack {
	t.Helper()
	return startStackWith(t, nw, stackOpts{routerArgs: extra})
}

// stackOpts vary the stack.
type stackOpts struct {
	// bind: the workers connect to the router's SUB socket (see
	// startBindStack).
	bind bool
	// simArgs and simEnv are added to every worker's.
	simArgs []string
	simEnv  map[string]string
	// routerArgs are extra router flags.
	routerArgs []string
	// eventProxy puts an eventproxy under the first worker's name, in
	// front of it (renamed <name>-real): the router's HTTP, events and
	// replay reach that worker through it, and the test can drop or swap
	// its event messages.
	eventProxy bool
}

// eventProxyPkg relays a worker's ports and KV events for stackOpts.eventProxy.
const eventProxyPkg = "github.com/warmpath/warmpath/tests/faults/eventproxy"

// eventsBindPort is the router's own SUB socket in the bind topology,
// published to the test too (Container.Endpoint).
const eventsBindPort = "5557"

// startBindStack is startStack in the other KV-event topology: the router
// binds one SUB socket (--kv-events-bind) and the workers connect to it,
// each naming itself in its topic.
func startBindStack(t *testing.T, extra ...string) *stack {
	t.Helper()
	return startStackWith(t, harness.NewNetwork(t), stackOpts{bind: true, routerArgs: extra})
}

func startStackWith(t *testing.T, nw *harness.Network, o stackOpts) *stack {
	t.Helper()
	s := &stack{workers: map[string]*harness.Container{}}
	for i, alias := range []string{"sim-a", "sim-b", "sim-c"} {
		u := "http://" + alias + ":8000"
		s.urls = append(s.urls, u)
		host := alias
		if o.eventProxy && i == 0 {
			host = alias + "-real"
		}
		events := `{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:8001","replay_endpoint":"tcp://*:8002"}`
		if o.bind {
			events = `{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://router:` + eventsBindPort + `","topic":"` + u + `"}`
		}
		s.workers[u] = harness.Start(t, harness.Spec{
			Package: simPkg, Network: nw, Aliases: []string{host},
			Args: append([]string{"--host", "0.0.0.0", "--port", "8000", "--model", model, "--time-scale", "2",
				"--max-model-len", "4096", "--num-gpu-blocks-override", "1024",
				"--kv-events-config", events, "--log-level", "warn", "--log-format", "text"}, o.simArgs...),
			Env:  simEnv(o.simEnv),
			Port: "8000", HealthPath: "/health",
		})
		if host != alias {
			s.proxy = harness.Start(t, harness.Spec{
				Package: eventProxyPkg, Network: nw, Aliases: []string{alias},
				Args: []string{"--forward", "0.0.0.0:8000=" + host + ":8000,0.0.0.0:8002=" + host + ":8002",
					"--events-listen", "tcp://0.0.0.0:8001", "--events-upstream", "tcp://" + host + ":8001", "--control", "0.0.0.0:9000"},
				Port: "9000", HealthPath: "/health",
			})
		}
	}
	args := []string{
		"--listen", "0.0.0.0:8080",
		"--workers", strings.Join(s.urls, ","),
		"--strategy", "kvaware",
		"--health-interval", probeInterval.String(), "--probe-timeout", probeInterval.String(),
		"--idle-timeout", idleTimeout.String(),
		"--log-format", "text", "--log-level", "warn",
	}
	var ports []string
	if o.bind {
		args = append(args, "--kv-events-bind", "tcp://0.0.0.0:"+eventsBindPort)
		ports = []string{eventsBindPort}
	} else {
		args = append(args, "--kv-events-endpoint", "tcp://{host}:{port+1}", "--kv-events-replay-endpoint", "tcp://{host}:{port+2}")
	}
	s.router = harness.Start(t, harness.Spec{
		Package: routerPkg, Network: nw, Aliases: []string{"router"},
		Args: append(args, o.routerArgs...),
		Port: "8080", HealthPath: "/ready", ExtraPorts: ports,
	})
	s.setBase(s.router.URL)
	ctrs := map[string]*harness.Container{"router": s.router}
	for u, c := range s.workers {
		ctrs[strings.TrimSuffix(strings.TrimPrefix(u, "http://"), ":8000")] = c
	}
	s.mem = sampleMemory(t, ctrs)
	s.waitRotation(t, 30*time.Second, func(eps map[string]endpoint) error {
		for _, u := range s.urls {
			ep, ok := eps[u]
			if !ok || !ep.InRotation() || !slices.Contains(ep.Models, model) {
				return fmt.Errorf("worker %s: %+v", u, ep)
			}
		}
		return nil
	})
	return s
}

// simEnv is every worker's environment plus extra.
func simEnv(extra map[string]string) map[string]string {
	env := map[string]string{"PYTHONHASHSEED": "0"}
	maps.Copy(env, extra)
	return env
}

func (s *stack) setBase(u string) { s.base.Store(&u) }
func (s *stack) url() string      { return *s.base.Load() }

// endpoint is one worker in the router's GET /debug/endpoints.
type endpoint = harness.RouterEndpoint

// endpoints returns the router's workers by URL.
func (s *stack) endpoints(ctx context.Context) (map[string]endpoint, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	eps, err := harness.RouterEndpoints(ctx, http.DefaultClient, s.url())
	if err != nil {
		return nil, err
	}
	m := make(map[string]endpoint, len(eps))
	for _, e := range eps {
		m[e.URL] = e
	}
	return m, nil
}

// waitRotation polls /debug/endpoints every 100ms until cond accepts it and
// returns when that was; it fails the test after limit.
func (s *stack) waitRotation(t *testing.T, limit time.Duration, cond func(map[string]endpoint) error) time.Time {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		eps, err := s.endpoints(t.Context())
		if err == nil {
			if err = cond(eps); err == nil {
				return time.Now()
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("router's workers after %v: %v", limit, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// outOfRotation accepts endpoints where worker is gone, unhealthy or ejected.
func outOfRotation(worker string) func(map[string]endpoint) error {
	return func(eps map[string]endpoint) error {
		if ep, ok := eps[worker]; ok && ep.InRotation() {
			return fmt.Errorf("worker %s still in rotation", worker)
		}
		return nil
	}
}

// inRotation accepts endpoints where worker is healthy and not ejected.
func inRotation(worker string) func(map[string]endpoint) error {
	return func(eps map[string]endpoint) error {
		if ep, ok := eps[worker]; !ok || !ep.InRotation() {
			return fmt.Errorf("worker %s not in rotation: %+v", worker, ep)
		}
		return nil
	}
}

// scrape returns the router's /metrics.
func (s *stack) scrape(t *testing.T) []byte {
	t.Helper()
	return mustGet(t, s.url()+"/metrics")
}

// mustGet is GetBody of u within 10 s, failing the test on error.
func mustGet(t *testing.T, u string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	b, err := harness.GetBody(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// getJSON decodes mustGet's body of u into v, failing the test on error.
func getJSON(t *testing.T, u string, v any) {
	t.Helper()
	b := mustGet(t, u)
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v: %s", u, err, b)
	}
}

// metric is the sum of the router's samples of name.
func (s *stack) metric(t *testing.T, name string) float64 {
	t.Helper()
	v, _, err := harness.SumSamples(s.scrape(t), name)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// waitMetric polls the router's name every 100ms until ok accepts its value
// and returns when that was; it fails the test after limit.
func (s *stack) waitMetric(t *testing.T, name string, limit time.Duration, ok func(float64) bool) time.Time {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		v := s.metric(t, name)
		if ok(v) {
			return time.Now()
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s = %v after %v", name, v, limit)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// retries reads the router's warmpath_router_retries_total by reason.
func (s *stack) retries(t *testing.T) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for line := range strings.Lines(string(s.scrape(t))) {
		rest, ok := strings.CutPrefix(line, `warmpath_router_retries_total{`)
		if !ok {
			continue
		}
		_, rest, _ = strings.Cut(rest, `reason="`)
		reason, rest, _ := strings.Cut(rest, `"`)
		_, val, _ := strings.Cut(rest, "} ")
		v, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil {
			t.Fatalf("retries_total line %q: %v", line, err)
		}
		out[reason] += v
	}
	return out
}
