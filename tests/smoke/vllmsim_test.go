// Package smoke checks, black-box and over plain HTTP, that each warmpath
// binary starts in its FROM-scratch image and honors its wire contract.
package smoke

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/warmpath/warmpath/tests/harness"
)

const (
	vllmSimPkg = "github.com/warmpath/warmpath/tools/cmd/vllm-sim"
	simModel   = "warmpath/smoke-model"
	// prefixHitsMetric counts prompt tokens served from the prefix cache,
	// as vLLM names it.
	prefixHitsMetric = "vllm:prefix_cache_hits_total"
)

func TestMain(m *testing.M) { harness.Main(m) }

func TestVLLMSim(t *testing.T) {
	sim := harness.Start(t, harness.Spec{
		Package:    vllmSimPkg,
		Args:       []string{"--host", "0.0.0.0", "--port", "8000", "--model", simModel, "--time-scale", "50"},
		Port:       "8000",
		HealthPath: "/health",
	})
	c := &client{base: sim.URL, http: &http.Client{Timeout: 30 * time.Second}}

	t.Run("health", func(t *testing.T) {
		status, body := c.do(t, http.MethodGet, "/health", nil)
		if status != http.StatusOK {
			t.Errorf("GET /health = %d %s, want 200", status, body)
		}
	})

	t.Run("models lists the served model", func(t *testing.T) {
		ids := c.modelIDs(t)
		if !slices.Contains(ids, simModel) {
			t.Errorf("model ids = %q, want %q among them", ids, simModel)
		}
	})

	t.Run("repeated prompt hits the prefix cache", func(t *testing.T) {
		prompt := longPrompt(600)
		hitsBefore := c.metricSum(t, prefixHitsMetric)

		first := c.complete(t, prompt)
		if got := first.Usage.PromptTokens; got < 300 || got > 1500 {
			t.Errorf("first: prompt_tokens = %d, want about 600", got)
		}
		if first.Usage.CompletionTokens <= 0 {
			t.Errorf("first: completion_tokens = %d, want > 0", first.Usage.CompletionTokens)
		}
		if got := first.cached(t); got != 0 {
			t.Errorf("first: cached_tokens = %d on a fresh worker, want 0", got)
		}

		second := c.complete(t, prompt)
		cached := second.cached(t)
		t.Logf("prompt_tokens %d; cached_tokens first %d, second %d",
			second.Usage.PromptTokens, first.cached(t), cached)
		if cached <= 0 || cached > second.Usage.PromptTokens {
			t.Errorf("second: cached_tokens = %d, want in (0, prompt_tokens=%d]", cached, second.Usage.PromptTokens)
		}

		// Counters may be folded in after the response is written; poll briefly.
		var hitsAfter float64
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			hitsAfter = c.metricSum(t, prefixHitsMetric)
			if hitsAfter > hitsBefore || time.Now().After(deadline) {
				break
			}
		}
		if hitsAfter <= hitsBefore {
			t.Errorf("%s = %v after a cache hit, want more than %v", prefixHitsMetric, hitsAfter, hitsBefore)
		}
	})

	t.Run("malformed JSON is a 400 OpenAI error", func(t *testing.T) {
		status, body := c.do(t, http.MethodPost, "/v1/completions", []byte(`{"model": "`+simModel+`", "prompt": `))
		if status != http.StatusBadRequest {
			t.Errorf("status = %d, want 400 (body %s)", status, body)
		}
		checkOpenAIError(t, body)
	})

	t.Run("metrics pass promtool", func(t *testing.T) {
		_, body := c.do(t, http.MethodGet, "/metrics", nil)
		harness.CheckMetrics(t, body)
	})
}

type client struct {
	base string
	http *http.Client
}

// do sends one request and returns the status and the whole body.
func (c *client) do(t *testing.T, method, path string, body []byte) (int, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return resp.StatusCode, b
}

func (c *client) getJSON(t *testing.T, path string, v any) {
	t.Helper()
	status, body := c.do(t, http.MethodGet, path, nil)
	if status != http.StatusOK {
		t.Fatalf("GET %s = %d %s, want 200", path, status, body)
	}
	if err := json.Unmarshal(body, v); err != nil {
		t.Fatalf("GET %s: %v in %s", path, err, body)
	}
}

type completion struct {
	Model   string `json:"model"`
	Choices []struct {
		Text string `json:"text"`
	} `json:"choices"`
	Usage struct {
		PromptTokens        int `json:"prompt_tokens"`
		CompletionTokens    int `json:"completion_tokens"`
		PromptTokensDetails *struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
}

func (r *completion) cached(t *testing.T) int {
	t.Helper()
	if r.Usage.PromptTokensDetails == nil {
		t.Fatal("usage.prompt_tokens_details is missing")
	}
	return r.Usage.PromptTokensDetails.CachedTokens
}

// complete sends a non-streaming /v1/completions request.
func (c *client) complete(t *testing.T, prompt string) *completion {
	t.Helper()
	req, err := json.Marshal(map[string]any{
		"model":       simModel,
		"prompt":      prompt,
		"max_tokens":  8,
		"temperature": 0,
		"stream":      false,
	})
	if err != nil {
		t.Fatal(err)
	}
	status, body := c.do(t, http.MethodPost, "/v1/completions", req)
	if status != http.StatusOK {
		t.Fatalf("POST /v1/completions = %d %s, want 200", status, body)
	}
	var r completion
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatalf("POST /v1/completions: %v in %s", err, body)
	}
	if len(r.Choices) == 0 {
		t.Errorf("POST /v1/completions: no choices in %s", body)
	}
	return &r
}

// metricSum scrapes /metrics and sums every sample of the named metric
// across its label sets; a metric that is absent counts as 0.
func (c *client) metricSum(t *testing.T, name string) float64 {
	t.Helper()
	status, body := c.do(t, http.MethodGet, "/metrics", nil)
	if status != http.StatusOK {
		t.Fatalf("GET /metrics = %d, want 200", status)
	}
	sum, _, err := harness.SumSamples(body, name)
	if err != nil {
		t.Fatal(err)
	}
	return sum
}

// longPrompt returns a deterministic English prompt of about n tokens: one
// common word is about one BPE token.
func longPrompt(n int) string {
	words := strings.Fields(`the cache keeps every block of a shared prefix warm so
		that the next request with the same system prompt skips most of its prefill
		and the router sends it to the worker that already holds those blocks while
		load stays balanced across all workers in the pool`)
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(' ')
		}
		// A stride coprime to the list length visits every word before repeating.
		b.WriteString(words[(i*7)%len(words)])
	}
	return b.String()
}

// checkOpenAIError fails unless body is an OpenAI-style error object.
func checkOpenAIError(t *testing.T, body []byte) {
	t.Helper()
	var e struct {
		Error *struct {
			Message string `json:"message"`
			Type    string `json:"type"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("body %s is not JSON: %v", body, err)
	}
	if e.Error == nil || e.Error.Message == "" || e.Error.Type == "" {
		t.Errorf("body = %s, want {\"error\":{\"message\":...,\"type\":...}}", body)
	}
}

// modelIDs returns the ids GET /v1/models lists, after checking it is an
// OpenAI model list.
func (c *client) modelIDs(t *testing.T) []string {
	t.Helper()
	var list struct {
		Object string `json:"object"`
		Data   []struct {
			ID     string `json:"id"`
			Object string `json:"object"`
		} `json:"data"`
	}
	c.getJSON(t, "/v1/models", &list)
	if list.Object != "list" {
		t.Errorf("object = %q, want %q", list.Object, "list")
	}
	var ids []string
	for _, m := range list.Data {
		ids = append(ids, m.ID)
	}
	return ids
}
