package app

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/warmpath/warmpath/libs/testredis"
	"github.com/warmpath/warmpath/tools/vllmsim/engine"
	"github.com/warmpath/warmpath/tools/vllmsim/kvpublish"
)

const modelName = "meta-llama/Llama-3.1-8B-Instruct"

// sim is an in-process simulated worker on a loopback port.
type sim struct {
	app  *App
	base string
	// stop shuts the worker down as SIGTERM does and waits for Serve to
	// return; the test's cleanup calls it too.
	stop func()
}

func startSim(t *testing.T, mod func(*Options)) *sim {
	t.Helper()
	o := DefaultOptions()
	o.TimeScale = 200
	o.HashSeed = "0"
	o.MaxModelLen = 4096
	o.NumGPUBlocksOverride = 2048
	if mod != nil {
		mod(&o)
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
	go func() { done <- a.Serve(ctx, ln, 5*time.Second) }()
	stop := sync.OnceFunc(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	t.Cleanup(stop)
	return &sim{app: a, base: "http://" + ln.Addr().String(), stop: stop}
}

func (s *sim) client() openai.Client {
	return openai.NewClient(option.WithBaseURL(s.base+"/v1/"), option.WithAPIKey("sim"), option.WithMaxRetries(0))
}

// metric returns the value of one sample line of /metrics, e.g.
// `vllm:prefix_cache_hits_total` or `vllm:time_to_first_token_seconds_sum`.
func (s *sim) metric(t *testing.T, name string) float64 {
	t.Helper()
	resp, err := http.Get(s.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("parse %q: %v", line, err)
		}
		return v
	}
	t.Fatalf("metric %s not found", name)
	return 0
}

// longPrompt is about n cl100k tokens of text unique to seed.
func longPrompt(seed string, n int) string {
	var sb strings.Builder
	for i := 0; sb.Len() < n*5; i++ {
		fmt.Fprintf(&sb, "%s document line %d talks about routing and caching. ", seed, i)
	}
	return sb.String()
}

func TestRepeatRequestHitsCacheAndLowersTTFT(t *testing.T) {
	s := startSim(t, nil)
	c := s.client()
	ctx := context.Background()
	prompt := longPrompt("repeat", 1500)
	params := openai.CompletionNewParams{
		Model:     openai.CompletionNewParamsModel(modelName),
		Prompt:    openai.CompletionNewParamsPromptUnion{OfString: openai.String(prompt)},
		MaxTokens: openai.Int(8),
	}
	first, err := c.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	ttft1 := s.metric(t, "vllm:time_to_first_token_seconds_sum")
	second, err := c.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	ttft2 := s.metric(t, "vllm:time_to_first_token_seconds_sum") - ttft1

	if got := first.Usage.PromptTokensDetails.CachedTokens; got != 0 {
		t.Errorf("first request cached_tokens = %d, want 0", got)
	}
	pt := first.Usage.PromptTokens
	wantCached := (pt - 1) / 16 * 16
	if got := second.Usage.PromptTokensDetails.CachedTokens; got != wantCached {
		t.Errorf("second request cached_tokens = %d, want %d of %d prompt tokens", got, wantCached, pt)
	}
	if !(ttft2 < ttft1/3) {
		t.Errorf("second TTFT %.4fs, want well below first %.4fs", ttft2, ttft1)
	}
	if got := s.metric(t, "vllm:prefix_cache_hits_total"); got != float64(wantCached) {
		t.Errorf("vllm:prefix_cache_hits_total = %v, want %d", got, wantCached)
	}
	if got := s.metric(t, "vllm:prefix_cache_queries_total"); got != float64(2*pt) {
		t.Errorf("vllm:prefix_cache_queries_total = %v, want %d", got, 2*pt)
	}
	if first.Choices[0].Text != second.Choices[0].Text || first.Choices[0].Text == "" {
		t.Errorf("identical requests gave %q and %q, want the same non-empty text", first.Choices[0].Text, second.Choices[0].Text)
	}
	if first.Usage.CompletionTokens != 8 || first.Choices[0].FinishReason != "length" {
		t.Errorf("completion tokens %d finish %q, want 8 and length", first.Usage.CompletionTokens, first.Choices[0].FinishReason)
	}
}

func TestOpenAIClientStreaming(t *testing.T) {
	s := startSim(t, nil)
	c := s.client()
	ctx := context.Background()

	t.Run("completions", func(t *testing.T) {
		stream := c.Completions.NewStreaming(ctx, openai.CompletionNewParams{
			Model:         openai.CompletionNewParamsModel(modelName),
			Prompt:        openai.CompletionNewParamsPromptUnion{OfString: openai.String("Tell me about caches.")},
			MaxTokens:     openai.Int(12),
			StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
		})
		var text strings.Builder
		chunks, finish := 0, ""
		var usage openai.CompletionUsage
		for stream.Next() {
			ch := stream.Current()
			if len(ch.Choices) > 0 {
				chunks++
				text.WriteString(ch.Choices[0].Text)
				if ch.Choices[0].FinishReason != "" {
					finish = string(ch.Choices[0].FinishReason)
				}
			}
			if ch.Usage.TotalTokens > 0 {
				usage = ch.Usage
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if chunks != 12 || finish != "length" {
			t.Errorf("got %d chunks finishing %q, want 12 and length", chunks, finish)
		}
		if usage.CompletionTokens != 12 || usage.PromptTokens == 0 {
			t.Errorf("usage = %+v, want 12 completion tokens and a prompt count", usage)
		}
		if len(strings.Fields(text.String())) != 12 {
			t.Errorf("streamed text %q, want 12 words", text.String())
		}
	})

	t.Run("chat", func(t *testing.T) {
		params := openai.ChatCompletionNewParams{
			Model:         openai.ChatModel(modelName),
			Messages:      []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("You are terse."), openai.UserMessage("Hello!")},
			MaxTokens:     openai.Int(6),
			StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
		}
		stream := c.Chat.Completions.NewStreaming(ctx, params)
		var acc openai.ChatCompletionAccumulator
		for stream.Next() {
			acc.AddChunk(stream.Current())
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if len(acc.Choices) != 1 || len(strings.Fields(acc.Choices[0].Message.Content)) != 6 {
			t.Fatalf("accumulated %+v, want one choice with 6 words", acc.Choices)
		}
		if acc.Usage.CompletionTokens != 6 {
			t.Errorf("usage completion tokens = %d, want 6", acc.Usage.CompletionTokens)
		}
		// Non-streamed: same prompt, so the same words and a prefix-cache hit.
		full, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: params.Model, Messages: params.Messages, MaxTokens: params.MaxTokens})
		if err != nil {
			t.Fatal(err)
		}
		if full.Choices[0].Message.Content != acc.Choices[0].Message.Content {
			t.Errorf("non-streamed content %q, want %q", full.Choices[0].Message.Content, acc.Choices[0].Message.Content)
		}
		if full.Object != "chat.completion" || full.Choices[0].Message.Role != "assistant" {
			t.Errorf("object %q role %q, want chat.completion and assistant", full.Object, full.Choices[0].Message.Role)
		}
	})
}

func postJSON(t *testing.T, url, body string) (int, []byte) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

func TestTokenizeAgreesWithUsage(t *testing.T) {
	s := startSim(t, nil)
	var tok struct {
		Count       int      `json:"count"`
		MaxModelLen int      `json:"max_model_len"`
		Tokens      []uint32 `json:"tokens"`
	}
	tests := []struct {
		name, tokenize, generate, path string
	}{
		{"prompt", `{"model":"` + modelName + `","prompt":"hello world, hello caches"}`,
			`{"model":"` + modelName + `","prompt":"hello world, hello caches","max_tokens":1}`, "/v1/completions"},
		{"messages", `{"model":"` + modelName + `","messages":[{"role":"user","content":"hi there"}]}`,
			`{"model":"` + modelName + `","messages":[{"role":"user","content":"hi there"}],"max_tokens":1}`, "/v1/chat/completions"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := postJSON(t, s.base+"/tokenize", tt.tokenize)
			if code != 200 {
				t.Fatalf("tokenize: %d %s", code, body)
			}
			if err := json.Unmarshal(body, &tok); err != nil {
				t.Fatal(err)
			}
			if tok.Count != len(tok.Tokens) || tok.Count == 0 || tok.MaxModelLen != 4096 {
				t.Fatalf("tokenize = %+v", tok)
			}
			code, body = postJSON(t, s.base+tt.path, tt.generate)
			if code != 200 {
				t.Fatalf("generate: %d %s", code, body)
			}
			var resp struct {
				Usage struct {
					PromptTokens int `json:"prompt_tokens"`
				} `json:"usage"`
			}
			if err := json.Unmarshal(body, &resp); err != nil {
				t.Fatal(err)
			}
			if resp.Usage.PromptTokens != tok.Count {
				t.Errorf("usage.prompt_tokens = %d, /tokenize count = %d", resp.Usage.PromptTokens, tok.Count)
			}
			// Token-id prompts are accepted and detokenize back to the text.
			ids, _ := json.Marshal(tok.Tokens)
			code, body = postJSON(t, s.base+"/detokenize", `{"model":"`+modelName+`","tokens":`+string(ids)+`}`)
			if code != 200 || !bytes.Contains(body, []byte(`"prompt"`)) {
				t.Fatalf("detokenize: %d %s", code, body)
			}
		})
	}
}

func TestErrors(t *testing.T) {
	s := startSim(t, func(o *Options) { o.MaxModelLen = 64; o.MaxBodyBytes = 4096; o.NumGPUBlocksOverride = 16 })
	big := strings.Repeat("x", 5000)
	tests := []struct {
		name, method, path, body string
		wantStatus               int
		wantParam                string
	}{
		{"malformed json", "POST", "/v1/completions", `{"prompt": "a",`, 400, ""},
		{"empty body", "POST", "/v1/completions", ``, 400, ""},
		{"trailing data", "POST", "/v1/completions", `{"prompt":"a"} {}`, 400, ""},
		{"wrong type", "POST", "/v1/completions", `{"prompt":"a","max_tokens":"ten"}`, 400, "max_tokens"},
		{"unknown model", "POST", "/v1/completions", `{"model":"gpt-9","prompt":"a"}`, 404, "model"},
		{"unknown model chat", "POST", "/v1/chat/completions", `{"model":"gpt-9","messages":[{"role":"user","content":"a"}]}`, 404, "model"},
		{"missing prompt", "POST", "/v1/completions", `{"model":"` + modelName + `"}`, 400, "prompt"},
		{"prompt over max model len", "POST", "/v1/completions", `{"prompt":"` + strings.Repeat("cache ", 100) + `"}`, 400, "prompt"},
		{"prompt plus max_tokens over limit", "POST", "/v1/completions", `{"prompt":"hello","max_tokens":100}`, 400, "max_tokens"},
		{"zero max_tokens", "POST", "/v1/completions", `{"prompt":"hello","max_tokens":0}`, 400, "max_tokens"},
		{"n above one", "POST", "/v1/completions", `{"prompt":"hello","n":2}`, 400, "n"},
		{"bad temperature", "POST", "/v1/completions", `{"prompt":"hello","temperature":-1}`, 400, "temperature"},
		{"stream options without stream", "POST", "/v1/completions", `{"prompt":"hello","stream_options":{"include_usage":true}}`, 400, "stream_options"},
		{"token id out of vocabulary", "POST", "/v1/completions", `{"prompt":[1,2,99999999]}`, 400, "prompt"},
		{"batched prompts", "POST", "/v1/completions", `{"prompt":["a","b"]}`, 400, "prompt"},
		{"empty messages", "POST", "/v1/chat/completions", `{"messages":[]}`, 400, "messages"},
		{"bad role", "POST", "/v1/chat/completions", `{"messages":[{"role":"wizard","content":"a"}]}`, 400, "messages"},
		{"image content", "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":[{"type":"image_url"}]}]}`, 400, ""},
		{"body too large", "POST", "/v1/completions", `{"prompt":"` + big + `"}`, 413, ""},
		{"tokenize without input", "POST", "/tokenize", `{}`, 400, "prompt"},
		{"detokenize bad id", "POST", "/detokenize", `{"tokens":[99999999]}`, 400, "tokens"},
		{"unknown route", "GET", "/v2/nothing", ``, 404, ""},
		{"wrong method", "GET", "/v1/completions", ``, 405, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, s.base+tt.path, strings.NewReader(tt.body))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var body struct {
				Error struct {
					Message string  `json:"message"`
					Type    string  `json:"type"`
					Param   *string `json:"param"`
					Code    int     `json:"code"`
				} `json:"error"`
			}
			if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
				t.Fatalf("error body is not JSON: %v", err)
			}
			if resp.StatusCode != tt.wantStatus || body.Error.Code != tt.wantStatus {
				t.Fatalf("status %d code %d (%s), want %d", resp.StatusCode, body.Error.Code, body.Error.Message, tt.wantStatus)
			}
			if body.Error.Message == "" || body.Error.Type == "" {
				t.Errorf("error %+v lacks message or type", body.Error)
			}
			if tt.wantParam != "" && (body.Error.Param == nil || *body.Error.Param != tt.wantParam) {
				t.Errorf("param = %v, want %q", body.Error.Param, tt.wantParam)
			}
		})
	}
	// Bad requests lose nothing: the worker still serves.
	if code, body := postJSON(t, s.base+"/v1/completions", `{"prompt":"hello","max_tokens":2}`); code != 200 {
		t.Fatalf("after errors: %d %s", code, body)
	}
}

func TestClientDisconnectAbortsRequest(t *testing.T) {
	s := startSim(t, func(o *Options) { o.TimeScale = 1 })
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", s.base+"/v1/completions",
		strings.NewReader(`{"prompt":"hello","max_tokens":2000,"stream":true}`))
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
	for {
		var running int
		s.app.rt.With(func(e *engine.Engine, _ float64) { running = e.NumRunning() + e.NumWaiting() })
		if running == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("request still in the engine after the client left (%d)", running)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestLMCacheL1ServesGPUEvictions(t *testing.T) {
	// 128 GPU blocks of 16 = 2048 tokens: a 1500-token prompt is evicted
	// from the GPU by the next distinct one, but stays in L1.
	s := startSim(t, func(o *Options) {
		o.NumGPUBlocksOverride = 128
		o.MaxModelLen = 2048
		o.KVTransferConfig = `{"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both"}`
		o.LMCache.MaxLocalCPUSizeGB = 1
	})
	c := s.client()
	ctx := context.Background()
	ask := func(p string) openai.CompletionUsage {
		t.Helper()
		r, err := c.Completions.New(ctx, openai.CompletionNewParams{
			Model: openai.CompletionNewParamsModel(modelName), MaxTokens: openai.Int(4),
			Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String(p)},
		})
		if err != nil {
			t.Fatal(err)
		}
		return r.Usage
	}
	a := longPrompt("alpha", 1500)
	first := ask(a)
	ask(longPrompt("bravo", 1500))
	ttftBefore := s.metric(t, "vllm:time_to_first_token_seconds_sum")
	again := ask(a)
	ttftAgain := s.metric(t, "vllm:time_to_first_token_seconds_sum") - ttftBefore

	wantL1 := first.PromptTokens / 256 * 256
	if got := again.PromptTokensDetails.CachedTokens; got < wantL1 {
		t.Errorf("cached tokens after GPU eviction = %d, want ≥ %d from L1", got, wantL1)
	}
	// L1 held the whole prompt; only what the GPU lost was loaded from it.
	if got := s.metric(t, "lmcache:num_lookup_hits_total"); got < float64(wantL1) {
		t.Errorf("lmcache:num_lookup_hits_total = %v, want ≥ %d", got, wantL1)
	}
	loaded := s.metric(t, "lmcache:num_hit_tokens_total")
	if loaded <= 0 || loaded != s.metric(t, "vllm:external_prefix_cache_hits_total") {
		t.Errorf("lmcache:num_hit_tokens_total = %v, want > 0 and equal to vllm:external_prefix_cache_hits_total", loaded)
	}
	// Loading from L1 is far cheaper than recomputing.
	ttftFirst := ttftBefore / 2
	if !(ttftAgain < ttftFirst/2) {
		t.Errorf("TTFT with L1 hit %.4fs, want < half of a cold prefill (~%.4fs)", ttftAgain, ttftFirst)
	}
	if s.metric(t, "lmcache:local_cache_usage") <= 0 {
		t.Error("lmcache:local_cache_usage is 0 after stores")
	}
}

func TestHealthModelsVersion(t *testing.T) {
	s := startSim(t, func(o *Options) { o.ServedModelNames = []string{"llama", "llama-alias"} })
	resp, err := http.Get(s.base + "/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("/health = %d", resp.StatusCode)
	}
	c := s.client()
	page, err := c.Models.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range page.Data {
		ids = append(ids, m.ID)
	}
	if strings.Join(ids, ",") != "llama,llama-alias" {
		t.Fatalf("models = %v, want [llama llama-alias]", ids)
	}
	if code, body := postJSON(t, s.base+"/v1/completions", `{"model":"llama-alias","prompt":"x","max_tokens":1}`); code != 200 {
		t.Fatalf("alias request: %d %s", code, body)
	}
	if code, body := postJSON(t, s.base+"/reset_prefix_cache", ``); code != 200 {
		t.Fatalf("reset_prefix_cache: %d %s", code, body)
	}
}

func httpGet(url string) ([]byte, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}

func TestTwoWorkersShareKVThroughL2(t *testing.T) {
	// Two workers share a real Redis as LMCache's L2, with L1 off so every
	// external hit is a remote one: the second serves from L2 a prefix the
	// first computed.
	l2 := testredis.Start(t)
	lmcache := func(o *Options) {
		o.KVTransferConfig = `{"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both"}`
		o.LMCache.LocalCPU = false
		o.LMCache.RemoteURL = l2
		o.LMCache.RemoteScale = 256 // 128 KiB values
	}
	a, b := startSim(t, lmcache), startSim(t, lmcache)
	params := openai.CompletionNewParams{
		Model:     openai.CompletionNewParamsModel(modelName),
		Prompt:    openai.CompletionNewParamsPromptUnion{OfString: openai.String(longPrompt("shared", 1500))},
		MaxTokens: openai.Int(4),
	}
	ca, cb := a.client(), b.client()
	first, err := ca.Completions.New(t.Context(), params)
	if err != nil {
		t.Fatal(err)
	}
	chunks := first.Usage.PromptTokens / 256
	deadline := time.Now().Add(10 * time.Second)
	for a.metric(t, "lmcache:num_remote_write_requests_total") < float64(chunks) {
		if time.Now().After(deadline) {
			t.Fatalf("worker a wrote %v chunks to L2, want %d", a.metric(t, "lmcache:num_remote_write_requests_total"), chunks)
		}
		time.Sleep(10 * time.Millisecond)
	}
	second, err := cb.Completions.New(t.Context(), params)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := second.Usage.PromptTokensDetails.CachedTokens, chunks*256; got != want {
		t.Errorf("worker b cached tokens = %d, want %d from L2", got, want)
	}
	if got, want := b.metric(t, "lmcache:num_remote_read_bytes_total"), float64(chunks*256*131072/256); got != want {
		t.Errorf("lmcache:num_remote_read_bytes_total = %v, want %v", got, want)
	}
	if got := b.metric(t, "vllm:external_prefix_cache_hits_total"); got != float64(chunks*256) {
		t.Errorf("vllm:external_prefix_cache_hits_total = %v, want %d", got, chunks*256)
	}
	if got := b.metric(t, "lmcache:remote_time_to_get_count"); got != float64(chunks) {
		t.Errorf("lmcache:remote_time_to_get_count = %v, want %d", got, chunks)
	}
	// The L2 fetch replaced the prefill: b's first token came sooner.
	if ta, tb := a.metric(t, "vllm:time_to_first_token_seconds_sum"), b.metric(t, "vllm:time_to_first_token_seconds_sum"); !(tb < ta) {
		t.Errorf("TTFT from L2 %.4fs, want below the cold prefill's %.4fs", tb, ta)
	}
}

// TestDebugGPUBlocks checks /debug/kv/gpu against the engine's pool: the
// blocks a router that applied every event credits the worker with, named
// as the events name them.
func TestDebugGPUBlocks(t *testing.T) {
	for _, intHashes := range []bool{false, true} {
		t.Run(fmt.Sprintf("int_hashes=%v", intHashes), func(t *testing.T) {
			s := startSim(t, func(o *Options) { o.KVEventsIntHashes = intHashes })
			c := s.client()
			if _, err := c.Completions.New(context.Background(), openai.CompletionNewParams{
				Model: openai.CompletionNewParamsModel(modelName), MaxTokens: openai.Int(4),
				Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String(longPrompt("gpu", 600))},
			}); err != nil {
				t.Fatal(err)
			}
			b, err := httpGet(s.base + "/debug/kv/gpu")
			if err != nil {
				t.Fatal(err)
			}
			var got struct {
				Blocks       []uint64 `json:"blocks"`
				NumGPUBlocks int      `json:"num_gpu_blocks"`
			}
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatalf("%v: %s", err, b)
			}
			want := map[uint64]bool{}
			s.app.rt.With(func(e *engine.Engine, _ float64) {
				for h := range e.Pool().CachedHashes() {
					want[kvpublish.WireHash(h, intHashes).Uint64()] = true
				}
			})
			if len(want) < 600/16/2 {
				t.Fatalf("the pool holds %d blocks after a 600-token prompt", len(want))
			}
			if len(got.Blocks) != len(want) || got.NumGPUBlocks != 2048 {
				t.Errorf("/debug/kv/gpu: %d blocks of %d, want %d of 2048", len(got.Blocks), got.NumGPUBlocks, len(want))
			}
			for _, h := range got.Blocks {
				if !want[h] {
					t.Errorf("/debug/kv/gpu names %#x, which the pool does not hold", h)
				}
			}
		})
	}
}

// TestModelDirectory: a --model that is an absolute path names a local
// model directory, as vLLM reads it: the worker starts only when the
// directory holds the model's config.json (vLLM fails to load the model
// otherwise), so a model fetch into the pod's volume is checked for real.
func TestModelDirectory(t *testing.T) {
	full := t.TempDir()
	if err := os.WriteFile(filepath.Join(full, "config.json"), []byte(`{"architectures":["LlamaForCausalLM"]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, model string
		wantErr     bool
	}{
		{"hub name", "meta-llama/Llama-3.1-8B-Instruct", false},
		{"directory with config.json", full, false},
		{"empty directory", t.TempDir(), true},
		{"missing directory", filepath.Join(full, "absent"), true},
		{"a file", filepath.Join(full, "config.json"), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := DefaultOptions()
			o.Model = tt.model
			o.ServedModelNames = []string{"m"}
			_, err := New(context.Background(), o)
			if (err != nil) != tt.wantErr {
				t.Fatalf("New with --model %s: err %v, want error %v", tt.model, err, tt.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), tt.model) {
				t.Errorf("error %q does not name the path", err)
			}
		})
	}
}
