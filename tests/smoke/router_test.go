package smoke

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/warmpath/warmpath/tests/harness"
)

const (
	routerPkg = "github.com/warmpath/warmpath/services/router/cmd/router"
	// routerRequestsMetric counts proxied requests by worker and code.
	routerRequestsMetric = "warmpath_router_requests_total"
	// routerRetriesMetric counts attempts moved to another worker.
	routerRetriesMetric = "warmpath_router_retries_total"
	// eventuallyTimeout bounds each wait for the router's view of its
	// workers to change; health checks run every 2s by default.
	eventuallyTimeout = 30 * time.Second
)

// TestRouter runs the router in front of two simulated vLLM workers on a
// user-defined network, where it reaches them as sim-a and sim-b, and checks
// its API from the host. Subtests run in order and share the workers' state.
func TestRouter(t *testing.T) {
	nw := harness.NewNetwork(t)
	// sims maps each worker's URL, as the router names it, to its container.
	sims := map[string]*harness.Container{}
	var workers []string
	for _, alias := range []string{"sim-a", "sim-b"} {
		u := "http://" + alias + ":8000"
		workers = append(workers, u)
		sims[u] = harness.Start(t, harness.Spec{
			Package:    vllmSimPkg,
			Args:       []string{"--host", "0.0.0.0", "--port", "8000", "--model", simModel, "--time-scale", "50"},
			Port:       "8000",
			HealthPath: "/health",
			Network:    nw,
			Aliases:    []string{alias},
		})
	}
	router := harness.Start(t, harness.Spec{
		Package: routerPkg,
		Args: []string{
			"--listen", "0.0.0.0:8080",
			"--workers", strings.Join(workers, ","),
			"--strategy", "prefixaware",
			"--log-format", "text",
		},
		Port: "8080",
		// Ready once at least one worker passed a health check.
		HealthPath: "/ready",
		Network:    nw,
		Aliases:    []string{"router"},
	})
	c := &client{base: router.URL, http: &http.Client{Timeout: 30 * time.Second}}

	t.Run("health", func(t *testing.T) {
		for _, path := range []string{"/health", "/ready"} {
			if status, body := c.do(t, http.MethodGet, path, nil); status != http.StatusOK {
				t.Errorf("GET %s = %d %s, want 200", path, status, body)
			}
		}
	})

	// /ready needs one healthy worker; the rest of the suite wants both,
	// with their models scraped.
	t.Run("debug endpoints shows both workers healthy", func(t *testing.T) {
		eventually(t, func() error {
			eps := c.endpoints(t)
			for _, w := range workers {
				ep, ok := eps[w]
				switch {
				case !ok:
					return fmt.Errorf("worker %s missing from %v", w, eps)
				case !ep.Healthy:
					return fmt.Errorf("worker %s is not healthy", w)
				case !slices.Contains(ep.Models, simModel):
					return fmt.Errorf("worker %s models = %q, want %q among them", w, ep.Models, simModel)
				}
			}
			if len(eps) != len(workers) {
				return fmt.Errorf("endpoints = %v, want exactly %q", eps, workers)
			}
			return nil
		})
	})

	t.Run("models lists the served model", func(t *testing.T) {
		ids := c.modelIDs(t)
		// Both workers serve one model: the merged list names it once.
		if !slices.Equal(ids, []string{simModel}) {
			t.Errorf("model ids = %q, want [%q]", ids, simModel)
		}
	})

	t.Run("completion returns usage", func(t *testing.T) {
		r := c.complete(t, "Say hello to the router.")
		if r.Model != simModel {
			t.Errorf("model = %q, want %q", r.Model, simModel)
		}
		if r.Usage.PromptTokens <= 0 || r.Usage.CompletionTokens <= 0 {
			t.Errorf("usage = %+v, want prompt and completion tokens", r.Usage)
		}
	})

	t.Run("chat completion returns usage", func(t *testing.T) {
		status, body := c.do(t, http.MethodPost, "/v1/chat/completions", chatBody(t, false))
		if status != http.StatusOK {
			t.Fatalf("POST /v1/chat/completions = %d %s, want 200", status, body)
		}
		var r struct {
			Choices []struct {
				Message struct {
					Role    string `json:"role"`
					Content string `json:"content"`
				} `json:"message"`
			} `json:"choices"`
			Usage struct {
				PromptTokens     int `json:"prompt_tokens"`
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal(body, &r); err != nil {
			t.Fatalf("%v in %s", err, body)
		}
		if len(r.Choices) == 0 || r.Choices[0].Message.Role != "assistant" {
			t.Errorf("choices = %+v, want an assistant message", r.Choices)
		}
		if r.Usage.PromptTokens <= 0 || r.Usage.CompletionTokens <= 0 {
			t.Errorf("usage = %+v, want prompt and completion tokens", r.Usage)
		}
	})

	t.Run("streamed completions arrive as SSE", func(t *testing.T) {
		for _, tc := range []struct {
			path string
			body []byte
		}{
			{"/v1/completions", completionBody(t, "Stream a few tokens, please.", true)},
			{"/v1/chat/completions", chatBody(t, true)},
		} {
			t.Run(tc.path, func(t *testing.T) {
				path, body := tc.path, tc.body
				events := c.stream(t, path, body)
				if len(events) < 2 {
					t.Fatalf("events = %q, want chunks then [DONE]", events)
				}
				if last := events[len(events)-1]; last != "[DONE]" {
					t.Errorf("last event = %q, want [DONE]", last)
				}
				for _, e := range events[:len(events)-1] {
					var chunk struct {
						Choices []json.RawMessage `json:"choices"`
					}
					if err := json.Unmarshal([]byte(e), &chunk); err != nil {
						t.Errorf("event %q is not a JSON chunk: %v", e, err)
					}
				}
			})
		}
	})

	// warm is the worker that holds the long prompt's prefix.
	var warm string
	prompt := longPrompt(600)
	t.Run("identical long prompts reach the same warm worker", func(t *testing.T) {
		hitsBefore := simHits(t, sims)

		first := c.complete(t, prompt)
		if got := first.Usage.PromptTokens; got < 300 || got > 1500 {
			t.Errorf("first: prompt_tokens = %d, want about 600", got)
		}
		second := c.complete(t, prompt)
		cached := second.cached(t)
		t.Logf("prompt_tokens %d; cached_tokens first %d, second %d",
			second.Usage.PromptTokens, first.cached(t), cached)
		if cached <= 0 || cached > second.Usage.PromptTokens {
			t.Fatalf("second: cached_tokens = %d, want in (0, prompt_tokens=%d]: the router split identical prompts",
				cached, second.Usage.PromptTokens)
		}

		// The worker that served the hit counts it; the other does not.
		eventually(t, func() error {
			var grew []string
			for u, hits := range simHits(t, sims) {
				if hits > hitsBefore[u] {
					grew = append(grew, u)
				}
			}
			if len(grew) != 1 {
				return fmt.Errorf("workers whose %s grew = %q, want exactly one", prefixHitsMetric, grew)
			}
			warm = grew[0]
			return nil
		})
		t.Logf("warm worker: %s", warm)
	})

	t.Run("unknown model is a 404 OpenAI error", func(t *testing.T) {
		body, err := json.Marshal(map[string]any{"model": "no/such-model", "prompt": "hi", "max_tokens": 4})
		if err != nil {
			t.Fatal(err)
		}
		status, resp := c.do(t, http.MethodPost, "/v1/completions", body)
		if status != http.StatusNotFound {
			t.Errorf("status = %d, want 404 (body %s)", status, resp)
		}
		checkOpenAIError(t, resp)
	})

	t.Run("a stopped worker is routed around and marked unhealthy", func(t *testing.T) {
		if warm == "" {
			warm = workers[0]
		}
		retriesBefore := c.metricSum(t, routerRetriesMetric)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// No grace: the worker vanishes as a crashed one would.
		if err := sims[warm].Stop(ctx, 0); err != nil {
			t.Fatal(err)
		}

		// The long prompt's affinity points at the stopped worker; the
		// router must retry it elsewhere (or skip it once ejected).
		for i := range 5 {
			r := c.complete(t, prompt)
			if r.Usage.PromptTokens <= 0 {
				t.Errorf("request %d after the stop: usage = %+v", i, r.Usage)
			}
		}
		if events := c.stream(t, "/v1/completions", completionBody(t, prompt, true)); len(events) == 0 || events[len(events)-1] != "[DONE]" {
			t.Errorf("streamed request after the stop: events = %q, want them to end with [DONE]", events)
		}
		t.Logf("%s grew by %v", routerRetriesMetric, c.metricSum(t, routerRetriesMetric)-retriesBefore)

		eventually(t, func() error {
			eps := c.endpoints(t)
			for _, w := range workers {
				if want := w != warm; eps[w].Healthy != want {
					return fmt.Errorf("worker %s healthy = %v, want %v", w, eps[w].Healthy, want)
				}
			}
			return nil
		})
		if status, body := c.do(t, http.MethodGet, "/ready", nil); status != http.StatusOK {
			t.Errorf("GET /ready with one worker left = %d %s, want 200", status, body)
		}
	})

	t.Run("metrics count requests", func(t *testing.T) {
		if got := c.metricSum(t, routerRequestsMetric); got <= 0 {
			t.Errorf("%s = %v after proxied requests, want > 0", routerRequestsMetric, got)
		}
	})

	t.Run("metrics pass promtool", func(t *testing.T) {
		_, body := c.do(t, http.MethodGet, "/metrics", nil)
		harness.CheckMetrics(t, body)
	})
}

// endpoint is one worker in the router's GET /debug/endpoints.
type endpoint struct {
	URL     string   `json:"url"`
	Healthy bool     `json:"healthy"`
	Models  []string `json:"models"`
}

func (e endpoint) String() string { return fmt.Sprintf("%s(healthy=%v)", e.URL, e.Healthy) }

// endpoints returns the router's workers by URL.
func (c *client) endpoints(t *testing.T) map[string]endpoint {
	t.Helper()
	var v struct {
		Endpoints []endpoint `json:"endpoints"`
	}
	c.getJSON(t, "/debug/endpoints", &v)
	m := make(map[string]endpoint, len(v.Endpoints))
	for _, e := range v.Endpoints {
		m[e.URL] = e
	}
	return m
}

// stream sends a streaming request and returns the data of each SSE event
// in order, checking the response is an event stream.
func (c *client) stream(t *testing.T, path string, body []byte) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	resp, err := c.http.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		t.Fatalf("POST %s = %d %s, want 200", path, resp.StatusCode, b.Bytes())
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Errorf("POST %s: Content-Type = %q, want text/event-stream", path, ct)
	}
	var events []string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			events = append(events, data)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("POST %s: read stream: %v", path, err)
	}
	return events
}

func completionBody(t *testing.T, prompt string, stream bool) []byte {
	t.Helper()
	b, err := json.Marshal(map[string]any{
		"model": simModel, "prompt": prompt, "max_tokens": 8, "temperature": 0, "stream": stream,
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func chatBody(t *testing.T, stream bool) []byte {
	t.Helper()
	b, err := json.Marshal(map[string]any{
		"model": simModel,
		"messages": []map[string]string{
			{"role": "system", "content": "You are a terse assistant."},
			{"role": "user", "content": "Name one prime number."},
		},
		"max_tokens": 8, "temperature": 0, "stream": stream,
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// simHits reads each worker's prefix-cache hit counter directly, from the
// host, by worker URL.
func simHits(t *testing.T, sims map[string]*harness.Container) map[string]float64 {
	t.Helper()
	hits := make(map[string]float64, len(sims))
	for u, sim := range sims {
		sc := &client{base: sim.URL, http: &http.Client{Timeout: 10 * time.Second}}
		hits[u] = sc.metricSum(t, prefixHitsMetric)
	}
	return hits
}

// eventually polls cond until it returns nil, failing the test with its last
// error after eventuallyTimeout.
func eventually(t *testing.T, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(eventuallyTimeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %v", eventuallyTimeout, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
