package routerbench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/warmpath/warmpath/libs/openai"
)

// maxUpstreamBody bounds what the fake worker reads of one request body.
const maxUpstreamBody = 1 << 20

// Upstream is a fake vLLM worker that answers as fast as Go's HTTP server
// allows, so that what a proxy in front of it adds dominates the difference
// between direct and proxied latency. It serves what the router needs to
// treat it as a worker: GET /health, GET /v1/models (one model), GET /metrics
// (the vllm: gauges the router scrapes), and POST /v1/completions, which
// reads the whole body and returns a fixed completion, or a fixed SSE stream
// when the body asks for `"stream":true`. Replies are encoded once, up
// front; nothing sleeps.
//
// An Upstream is an http.Handler and is safe for concurrent use. Build it
// with NewUpstream; the zero value is not usable.
type Upstream struct {
	mux        *http.ServeMux
	model      string
	models     []byte
	completion []byte
	// events are the stream's SSE events, each `data: ...\n\n`, the last
	// one `data: [DONE]\n\n`.
	events   [][]byte
	inflight atomic.Int64
	bufs     sync.Pool // *bytes.Buffer for request bodies
}

var _ http.Handler = (*Upstream)(nil)

// NewUpstream returns a fake worker serving model whose streamed replies
// carry chunks text events before [DONE]. It panics if chunks < 1.
func NewUpstream(model string, chunks int) *Upstream {
	if chunks < 1 {
		panic("routerbench: NewUpstream needs at least one stream chunk")
	}
	u := &Upstream{mux: http.NewServeMux(), model: model}
	u.bufs.New = func() any { return new(bytes.Buffer) }
	u.models = mustJSON(openai.ModelList{Object: "list", Data: []openai.Model{
		{ID: model, Object: "model", Created: time.Now().Unix(), OwnedBy: "vllm", Root: model},
	}})
	stop := "length"
	u.completion = mustJSON(openai.CompletionResponse{
		ID: "cmpl-bench", Object: "text_completion", Created: time.Now().Unix(), Model: model,
		Choices: []openai.CompletionChoice{{Text: " the quick brown fox jumps over the lazy dog", FinishReason: &stop}},
		Usage:   &openai.Usage{PromptTokens: 2048, CompletionTokens: 16, TotalTokens: 2064},
	})
	for i := range chunks {
		chunk := openai.CompletionResponse{
			ID: "cmpl-bench", Object: "text_completion", Created: time.Now().Unix(), Model: model,
			Choices: []openai.CompletionChoice{{Text: " tok" + strconv.Itoa(i)}},
		}
		if i == chunks-1 {
			chunk.Choices[0].FinishReason = &stop
		}
		u.events = append(u.events, sseEvent(mustJSON(chunk)))
	}
	u.events = append(u.events, sseEvent([]byte(openai.DoneData)))

	u.mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	u.mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, u.models) })
	u.mux.HandleFunc("GET /metrics", u.metrics)
	u.mux.HandleFunc("POST /v1/completions", u.completions)
	return u
}

// ServeHTTP serves the fake worker's API.
func (u *Upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) { u.mux.ServeHTTP(w, r) }

func (u *Upstream) completions(w http.ResponseWriter, r *http.Request) {
	u.inflight.Add(1)
	defer u.inflight.Add(-1)
	buf := u.bufs.Get().(*bytes.Buffer)
	defer u.bufs.Put(buf)
	buf.Reset()
	if _, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, maxUpstreamBody)); err != nil {
		openai.WriteError(w, openai.Errorf(http.StatusBadRequest, "read body: %v", err))
		return
	}
	if !streamRequested(buf.Bytes()) {
		writeJSON(w, u.completion)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	f, _ := w.(http.Flusher)
	for _, ev := range u.events {
		if _, err := w.Write(ev); err != nil {
			return // the client went away
		}
		if f != nil {
			f.Flush()
		}
	}
}

// metrics writes the gauges the router scrapes, in the names and label
// layout vLLM uses. num_requests_running is the live count of completions
// being answered; the rest are constant.
func (u *Upstream) metrics(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	_, _ = fmt.Fprintf(w, `# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name=%[1]q} %[2]d
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name=%[1]q} 0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name=%[1]q} 0
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig.
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",num_gpu_blocks="10000"} 1
`, u.model, u.inflight.Load())
}

// streamRequested reports whether a JSON request body sets "stream" to
// true. It scans instead of decoding so the fake worker's cost stays a
// small constant; a `"stream"` inside a JSON string is escaped as
// `\"stream\"` and is skipped.
func streamRequested(body []byte) bool {
	key := []byte(`"stream"`)
	for off := 0; ; {
		i := bytes.Index(body[off:], key)
		if i < 0 {
			return false
		}
		i += off
		off = i + len(key)
		if i > 0 && body[i-1] == '\\' {
			continue
		}
		rest := bytes.TrimLeft(body[off:], " \t\r\n")
		if len(rest) == 0 || rest[0] != ':' {
			continue
		}
		return bytes.HasPrefix(bytes.TrimLeft(rest[1:], " \t\r\n"), []byte("true"))
	}
}

func sseEvent(payload []byte) []byte {
	ev := make([]byte, 0, len(payload)+8)
	ev = append(ev, "data: "...)
	ev = append(ev, payload...)
	return append(ev, '\n', '\n')
}

func writeJSON(w http.ResponseWriter, body []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	_, _ = w.Write(body)
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("routerbench: encode %T: %v", v, err))
	}
	return b
}
