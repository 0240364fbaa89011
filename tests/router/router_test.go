package router

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/warmpath/warmpath/libs/testnet"
	"github.com/warmpath/warmpath/libs/testwait"
	"github.com/warmpath/warmpath/tests/harness"
)

func client(r *router) openai.Client {
	return openai.NewClient(option.WithBaseURL(r.url+"/v1/"), option.WithAPIKey("k"), option.WithMaxRetries(0))
}

func TestOpenAIClientThroughRouter(t *testing.T) {
	ws := []*worker{startWorker(t), startWorker(t)}
	r := startRouter(t, ws)
	c := client(r)
	ctx := context.Background()

	t.Run("completion", func(t *testing.T) {
		res, err := c.Completions.New(ctx, openai.CompletionNewParams{
			Model:     openai.CompletionNewParamsModel(simModel),
			Prompt:    openai.CompletionNewParamsPromptUnion{OfString: openai.String("Hello through the router")},
			MaxTokens: openai.Int(5),
		})
		if err != nil {
			t.Fatal(err)
		}
		if res.Usage.CompletionTokens != 5 || len(res.Choices) != 1 {
			t.Fatalf("got %+v", res)
		}
	})
	t.Run("streamed completion", func(t *testing.T) {
		stream := c.Completions.NewStreaming(ctx, openai.CompletionNewParams{
			Model:         openai.CompletionNewParamsModel(simModel),
			Prompt:        openai.CompletionNewParamsPromptUnion{OfString: openai.String("Stream through the router")},
			MaxTokens:     openai.Int(7),
			StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
		})
		chunks := 0
		var usage int64
		for stream.Next() {
			ch := stream.Current()
			if len(ch.Choices) > 0 {
				chunks++
			}
			if ch.Usage.CompletionTokens > 0 {
				usage = ch.Usage.CompletionTokens
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if chunks != 7 || usage != 7 {
			t.Fatalf("got %d chunks, usage %d; want 7 and 7", chunks, usage)
		}
	})
	t.Run("streamed chat", func(t *testing.T) {
		stream := c.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
			Model:     openai.ChatModel(simModel),
			Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
			MaxTokens: openai.Int(4),
		})
		var acc openai.ChatCompletionAccumulator
		for stream.Next() {
			acc.AddChunk(stream.Current())
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if len(acc.Choices) != 1 || len(strings.Fields(acc.Choices[0].Message.Content)) != 4 {
			t.Fatalf("accumulated %+v", acc.Choices)
		}
	})
	t.Run("chat", func(t *testing.T) {
		res, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model:     openai.ChatModel(simModel),
			Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
			MaxTokens: openai.Int(3),
		})
		if err != nil {
			t.Fatal(err)
		}
		if res.Choices[0].Message.Role != "assistant" {
			t.Fatalf("got %+v", res)
		}
	})
	t.Run("models merged", func(t *testing.T) {
		page, err := c.Models.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Data) != 1 || page.Data[0].ID != simModel {
			t.Fatalf("models = %+v, want [%s]", page.Data, simModel)
		}
	})
	t.Run("tokenize and request id", func(t *testing.T) {
		resp, body := post(t, r.url+"/tokenize", `{"model":"`+simModel+`","prompt":"hello world"}`, "X-Request-Id", "req-123")
		if resp.StatusCode != 200 || !bytes.Contains(body, []byte(`"tokens"`)) {
			t.Fatalf("tokenize: %d %s", resp.StatusCode, body)
		}
		if got := resp.Header.Get("X-Request-Id"); got != "req-123" {
			t.Fatalf("X-Request-Id = %q, want req-123", got)
		}
		resp, _ = post(t, r.url+"/detokenize", `{"model":"`+simModel+`","tokens":[15339,1917]}`)
		if resp.StatusCode != 200 || resp.Header.Get("X-Request-Id") == "" {
			t.Fatalf("detokenize: %d, request id %q", resp.StatusCode, resp.Header.Get("X-Request-Id"))
		}
	})
}

func TestErrorCodes(t *testing.T) {
	w := startWorker(t)
	r := startRouter(t, []*worker{w}, "--max-body-bytes", "1024")
	tests := []struct {
		name, path, body string
		want             int
		param            string
	}{
		{"malformed json", "/v1/completions", `{"model":`, 400, ""},
		{"missing model", "/v1/completions", `{"prompt":"x"}`, 400, "model"},
		{"unknown model", "/v1/completions", `{"model":"nope","prompt":"x"}`, 404, "model"},
		{"body too large", "/v1/completions", `{"model":"` + simModel + `","prompt":"` + strings.Repeat("x", 2000) + `"}`, 413, ""},
		{"worker's own validation passes through", "/v1/completions", `{"model":"` + simModel + `","prompt":"x","max_tokens":0}`, 400, "max_tokens"},
		{"unknown route", "/v2/x", `{}`, 404, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := post(t, r.url+tt.path, tt.body)
			checkError(t, resp, body, tt.want, tt.param)
		})
	}
	for _, path := range []string{"/v1/completions", "/v1/models"} {
		t.Run("wrong method on "+path, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodDelete, r.url+path, nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			checkError(t, resp, body, 405, "")
		})
	}
}

func checkError(t *testing.T, resp *http.Response, body []byte, want int, param string) {
	t.Helper()
	var e struct {
		Error struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Param   *string `json:"param"`
			Code    int     `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("status %d, body not an OpenAI error: %s", resp.StatusCode, body)
	}
	if resp.StatusCode != want || e.Error.Code != want || e.Error.Message == "" {
		t.Fatalf("status %d code %d (%s), want %d", resp.StatusCode, e.Error.Code, e.Error.Message, want)
	}
	if param != "" && (e.Error.Param == nil || *e.Error.Param != param) {
		t.Fatalf("param %v, want %q", e.Error.Param, param)
	}
}

func TestAPIKey(t *testing.T) {
	w := startWorker(t)
	r := startRouter(t, []*worker{w}, "--api-key", "s3cret")
	body := `{"model":"` + simModel + `","prompt":"x","max_tokens":1}`
	resp, b := post(t, r.url+"/v1/completions", body)
	checkError(t, resp, b, 401, "")
	resp, b = post(t, r.url+"/v1/completions", body, "Authorization", "Bearer s3cret")
	if resp.StatusCode != 200 {
		t.Fatalf("with key: %d %s", resp.StatusCode, b)
	}
}

func TestNoHealthyWorker(t *testing.T) {
	w := startWorker(t)
	r := startRouter(t, []*worker{w})
	w.kill()
	deadline := time.Now().Add(5 * time.Second)
	for r.endpoint(t, w.url).InRotation() {
		if time.Now().After(deadline) {
			t.Fatal("dead worker still available after 5s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	resp, body := post(t, r.url+"/v1/completions", `{"model":"`+simModel+`","prompt":"x"}`)
	checkError(t, resp, body, 503, "")
	rr, err := http.Get(r.url + "/ready")
	if err != nil {
		t.Fatal(err)
	}
	rr.Body.Close()
	if rr.StatusCode != 503 {
		t.Fatalf("/ready = %d with no healthy worker, want 503", rr.StatusCode)
	}
}

func TestFailoverAndEjection(t *testing.T) {
	a, b := startWorker(t), startWorker(t)
	// Slow health checks, so requests meet the dead worker before the
	// active check notices.
	r := startRouter(t, []*worker{a, b}, "--strategy", "roundrobin", "--health-interval", "1h")
	a.kill()
	for i := range 6 {
		resp, body := post(t, r.url+"/v1/completions", `{"model":"`+simModel+`","prompt":"failover","max_tokens":1}`)
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: %d %s (want a retry onto the live worker)", i, resp.StatusCode, body)
		}
	}
	if got := scrape(t, r.url+"/metrics", "warmpath_router_retries_total"); got < 1 {
		t.Errorf("retries_total = %v, want ≥ 1", got)
	}
	if got := scrape(t, r.url+"/metrics", "warmpath_router_ejections_total"); got < 1 {
		t.Errorf("ejections_total = %v, want ≥ 1 after consecutive connect failures", got)
	}
	if r.endpoint(t, a.url).EjectedUntil == nil {
		t.Error("dead worker not ejected")
	}
}

func TestTimeouts(t *testing.T) {
	// time-scale 0.02: a short prompt's prefill and each decode step take
	// about 0.4 s of wall time.
	slow := startWorker(t, "--time-scale", "0.02")
	t.Run("ttfb", func(t *testing.T) {
		r := startRouter(t, []*worker{slow}, "--ttfb-timeout", "100ms")
		resp, body := post(t, r.url+"/v1/completions", `{"model":"`+simModel+`","prompt":"slow","max_tokens":1}`)
		checkError(t, resp, body, 504, "")
	})
	t.Run("idle between chunks", func(t *testing.T) {
		r := startRouter(t, []*worker{slow}, "--ttfb-timeout", "10s", "--idle-timeout", "150ms")
		resp, err := http.Post(r.url+"/v1/completions", "application/json",
			strings.NewReader(`{"model":"`+simModel+`","prompt":"slow","max_tokens":5,"stream":true}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		// The status is already sent when the worker stalls; the client
		// learns of the cut from an error event before [DONE], as vLLM
		// ends a stream that failed, not from a stream that looks
		// complete.
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("reading the cut stream: %v", err)
		}
		if !bytes.HasSuffix(body, []byte("\n\ndata: [DONE]\n\n")) || !bytes.Contains(body, []byte(`data: {"error":{`)) ||
			!bytes.Contains(body, []byte(`"code":504}}`)) {
			t.Fatalf("stream cut by idle gaps over the timeout, want it to end with a 504 error event and [DONE]: %s", body)
		}
		if got := scrape(t, r.url+"/metrics", `warmpath_router_requests_total{code="504"`); got != 1 {
			t.Errorf("504 count = %v, want 1", got)
		}
	})
}

func TestConcurrencyLimit(t *testing.T) {
	slow := startWorker(t, "--time-scale", "0.05")
	r := startRouter(t, []*worker{slow}, "--max-concurrent-requests", "1", "--max-queue-size", "0", "--overflow-status-code", "429")
	body := `{"model":"` + simModel + `","prompt":"hold","max_tokens":2}`
	first := make(chan int, 1)
	go func() {
		resp, _ := post(t, r.url+"/v1/completions", body)
		first <- resp.StatusCode
	}()
	// Wait until the first request holds the only slot.
	deadline := time.Now().Add(5 * time.Second)
	for scrape(t, r.url+"/metrics", "warmpath_router_active_requests") < 1 {
		if time.Now().After(deadline) {
			t.Fatal("first request never became active")
		}
		time.Sleep(5 * time.Millisecond)
	}
	resp, b := post(t, r.url+"/v1/completions", body)
	checkError(t, resp, b, 429, "")
	if resp.Header.Get("Retry-After") == "" {
		t.Error("429 without Retry-After")
	}
	if code := <-first; code != 200 {
		t.Fatalf("first request: %d", code)
	}
}

func TestClientDisconnectCancelsUpstream(t *testing.T) {
	w := startWorker(t, "--time-scale", "1")
	r := startRouter(t, []*worker{w})
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, r.url+"/v1/completions",
		strings.NewReader(`{"model":"`+simModel+`","prompt":"long one","max_tokens":3000,"stream":true}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	cancel()
	resp.Body.Close()
	deadline := time.Now().Add(5 * time.Second)
	for w.metric(t, "vllm:num_requests_running") > 0 {
		if time.Now().After(deadline) {
			t.Fatal("worker still running the request 5s after the client left")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestClientDisconnectDuringPrefill: a client that leaves before the first
// token (nothing has been written to it yet, so no write can fail) still
// cancels the worker's request.
func TestClientDisconnectDuringPrefill(t *testing.T) {
	// time-scale 1: a 6000-token prompt's prefill takes about a second.
	w := startWorker(t, "--time-scale", "1")
	r := startRouter(t, []*worker{w})
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, r.url+"/v1/completions",
		strings.NewReader(`{"model":"`+simModel+`","prompt":"`+strings.Repeat("long prefill ", 2000)+`","max_tokens":2000}`))
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("got status %d before the prefill could end", resp.StatusCode)
	}
	deadline := time.Now().Add(5 * time.Second)
	for scrape(t, r.url+"/metrics", `warmpath_router_requests_total{code="499"`) != 1 || w.metric(t, "vllm:num_requests_running") > 0 {
		if time.Now().After(deadline) {
			t.Fatal("the worker's request was not cancelled (or not counted as 499) 5s after the client left")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestGracefulShutdownFinishesStreams(t *testing.T) {
	w := startWorker(t, "--time-scale", "0.5")
	r := startRouter(t, []*worker{w})
	got := make(chan []byte, 1)
	go func() {
		_, body := post(t, r.url+"/v1/completions", `{"model":"`+simModel+`","prompt":"finish me","max_tokens":20,"stream":true}`)
		got <- body
	}()
	deadline := time.Now().Add(5 * time.Second)
	for r.endpoint(t, w.url).InFlight == 0 {
		if time.Now().After(deadline) {
			t.Fatal("stream never started")
		}
		time.Sleep(5 * time.Millisecond)
	}
	shutdown(t, r) // as on SIGTERM: stop accepting, let the stream finish
	if _, err := http.Get(r.url + "/health"); err == nil {
		t.Error("router still accepts connections after shutdown")
	}
	body := <-got
	if !bytes.Contains(body, []byte("[DONE]")) {
		t.Fatalf("in-flight stream was cut by shutdown: %s", body)
	}
}

func TestConfigReload(t *testing.T) {
	w := startWorker(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "routing.yaml")
	if err := os.WriteFile(path, []byte("strategy: roundrobin\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := startRouter(t, []*worker{w}, "--config", path)
	strategyNow := func() string {
		var cfg struct {
			Strategy string `json:"strategy"`
		}
		if err := json.Unmarshal(r.get(t, "/debug/config"), &cfg); err != nil {
			t.Fatal(err)
		}
		return cfg.Strategy
	}
	if got := strategyNow(); got != "roundrobin" {
		t.Fatalf("strategy = %q, want roundrobin", got)
	}
	// A broken file keeps the running configuration.
	if err := os.WriteFile(path, []byte("strategy: bogus\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 5*time.Second, "the bad file's reload error", func() bool {
		return scrape(t, r.url+"/metrics", `warmpath_router_config_reloads_total{result="error"}`) >= 1
	})
	if got := strategyNow(); got != "roundrobin" {
		t.Fatalf("after a bad file strategy = %q, want roundrobin kept", got)
	}
	// Rename into place, as editors and ConfigMaps do.
	tmp := filepath.Join(dir, "new.yaml")
	if err := os.WriteFile(tmp, []byte("strategy: session\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 5*time.Second, "the session strategy from the renamed file", func() bool { return strategyNow() == "session" })
}

func TestPromtoolCheckMetrics(t *testing.T) {
	// kvaware on an event-publishing worker, so the kv_* and tokenize
	// metrics are in the exposition too.
	w := startEventWorker(t, testnet.FreePortRun(t, 3, nil), "map")
	r := startRouter(t, []*worker{w}, append(kvEvents(), "--strategy", "kvaware")...)
	post(t, r.url+"/v1/completions", `{"model":"`+simModel+`","prompt":"metrics `+strings.Repeat("and more words ", 40)+`","max_tokens":2}`)
	post(t, r.url+"/v1/completions", `{"model":"nope","prompt":"x"}`)
	waitIndexed(t, r, 1)
	exposition := r.get(t, "/metrics")
	harness.CheckMetrics(t, exposition)
	for _, name := range []string{"warmpath_router_requests_total", "warmpath_router_ttft_seconds_bucket",
		"warmpath_router_routing_decision_duration_seconds_bucket", "warmpath_router_prefix_match_ratio_bucket",
		"warmpath_router_inflight_requests", "warmpath_router_pending_prefill_tokens", "warmpath_router_worker_healthy", "warmpath_router_rejections_total",
		"warmpath_router_tokenize_total", "warmpath_router_kv_events_total", "warmpath_router_kv_index_blocks", "warmpath_router_kv_subscribed"} {
		if !bytes.Contains(exposition, []byte(name)) {
			t.Errorf("/metrics lacks %s", name)
		}
	}
}

// TestPerWorkerLimitQueues: with one worker allowed one request at a time,
// a second request waits for the slot instead of piling onto the worker.
func TestPerWorkerLimitQueues(t *testing.T) {
	w := startWorker(t, "--time-scale", "0.1")
	r := startRouter(t, []*worker{w}, "--max-concurrent-per-worker", "1", "--max-queue-size", "8", "--queue-timeout", "30s")
	stop := make(chan struct{})
	maxSeen := make(chan int, 1)
	go func() {
		peak := 0
		for {
			select {
			case <-stop:
				maxSeen <- peak
				return
			default:
				if n, err := r.inFlight(); err == nil {
					peak = max(peak, n[w.url])
				}
				time.Sleep(time.Millisecond)
			}
		}
	}()
	codes := make(chan int, 2)
	for range 2 {
		go func() {
			resp, _ := post(t, r.url+"/v1/completions", `{"model":"`+simModel+`","prompt":"one at a time","max_tokens":3}`)
			codes <- resp.StatusCode
		}()
	}
	for range 2 {
		if code := <-codes; code != 200 {
			t.Errorf("status %d, want 200 after waiting for the worker's slot", code)
		}
	}
	close(stop)
	if peak := <-maxSeen; peak != 1 {
		t.Errorf("peak in-flight at the worker = %d, want 1", peak)
	}
}
