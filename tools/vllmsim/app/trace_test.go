package app

import (
	"context"
	"encoding/hex"
	"math"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/warmpath/warmpath/libs/telemetry"
)

func TestTracesProtocol(t *testing.T) {
	for _, tc := range []struct {
		env  *string
		want telemetry.Protocol
	}{
		{nil, telemetry.ProtocolGRPC}, // vLLM's default
		{ptr("grpc"), telemetry.ProtocolGRPC},
		{ptr("http/protobuf"), telemetry.ProtocolHTTP},
		{ptr("http/json"), ""}, // neither vLLM's exporters nor ours speak it
		{ptr("HTTP/PROTOBUF"), ""},
		{ptr(""), ""}, // set but empty is not unset
	} {
		lookup := func(k string) (string, bool) {
			if k != telemetry.TracesProtocolEnv || tc.env == nil {
				return "", false
			}
			return *tc.env, true
		}
		got, err := TracesProtocol(lookup)
		if tc.want == "" {
			if err == nil {
				t.Errorf("%s=%q accepted as %q, want an error", telemetry.TracesProtocolEnv, *tc.env, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("env %v: got %q, %v; want %q", tc.env, got, err, tc.want)
		}
	}
}

func ptr(s string) *string { return &s }

// spanRecorder keeps every exported span, past the provider's shutdown
// (tracetest's in-memory exporter forgets them then).
type spanRecorder struct {
	mu    sync.Mutex
	spans []sdktrace.ReadOnlySpan
}

func (r *spanRecorder) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.spans = append(r.spans, spans...)
	return nil
}

func (*spanRecorder) Shutdown(context.Context) error { return nil }

// TestLLMRequestSpan checks the span vLLM exports per finished request: it
// continues the caller's trace, starts at arrival, and its latencies are
// the modelled seconds /metrics reports.
func TestLLMRequestSpan(t *testing.T) {
	rec := &spanRecorder{}
	s := startSim(t, func(o *Options) { o.TraceExporter = rec })
	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	c := s.client()
	resp, err := c.Completions.New(t.Context(), openai.CompletionNewParams{
		Model:     openai.CompletionNewParamsModel(modelName),
		Prompt:    openai.CompletionNewParamsPromptUnion{OfString: openai.String(longPrompt("trace", 300))},
		MaxTokens: openai.Int(5), Temperature: openai.Float(0),
	}, option.WithHeader("Traceparent", "00-"+traceID+"-"+parentID+"-01"))
	if err != nil {
		t.Fatal(err)
	}
	ttftSum := s.metric(t, "vllm:time_to_first_token_seconds_sum")
	e2eSum := s.metric(t, "vllm:e2e_request_latency_seconds_sum")
	s.stop() // flushes the spans
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.spans) != 1 {
		t.Fatalf("%d spans exported, want 1", len(rec.spans))
	}
	sp := rec.spans[0]
	if sp.Name() != "llm_request" || sp.SpanKind() != trace.SpanKindServer {
		t.Errorf("span %q kind %v, want llm_request SERVER", sp.Name(), sp.SpanKind())
	}
	if got := sp.SpanContext().TraceID(); hex.EncodeToString(got[:]) != traceID {
		t.Errorf("trace id %s, want the caller's %s", got, traceID)
	}
	if got := sp.Parent().SpanID(); hex.EncodeToString(got[:]) != parentID || !sp.Parent().IsRemote() {
		t.Errorf("parent %s, want the caller's remote span %s", got, parentID)
	}
	if v, _ := sp.Resource().Set().Value("service.name"); v.AsString() != "vllm" {
		t.Errorf("service.name %q, want vllm", v.AsString())
	}
	attrs := map[attribute.Key]attribute.Value{}
	for _, kv := range sp.Attributes() {
		attrs[kv.Key] = kv.Value
	}
	for k, want := range map[attribute.Key]int64{
		"gen_ai.usage.prompt_tokens": resp.Usage.PromptTokens, "gen_ai.usage.completion_tokens": resp.Usage.CompletionTokens,
		"gen_ai.request.max_tokens": 5, "gen_ai.request.n": 1,
	} {
		if got := attrs[k].AsInt64(); got != want {
			t.Errorf("%s = %d, want %d", k, got, want)
		}
	}
	if attrs["gen_ai.request.id"].AsString() != resp.ID || attrs["gen_ai.response.model"].AsString() != modelName {
		t.Errorf("request id %q model %q, want %q %q", attrs["gen_ai.request.id"].AsString(), attrs["gen_ai.response.model"].AsString(), resp.ID, modelName)
	}
	if _, ok := attrs["gen_ai.request.temperature"]; ok {
		t.Error("temperature 0 reported; vLLM leaves falsy parameters out")
	}
	if got := attrs["gen_ai.request.top_p"].AsFloat64(); got != 1 {
		t.Errorf("top_p %v, want vLLM's default 1", got)
	}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	ttft, e2e := attrs["gen_ai.latency.time_to_first_token"].AsFloat64(), attrs["gen_ai.latency.e2e"].AsFloat64()
	if ttft <= 0 || !near(ttft, ttftSum) || !near(e2e, e2eSum) {
		t.Errorf("ttft %v e2e %v, want /metrics' %v %v", ttft, e2e, ttftSum, e2eSum)
	}
	prefill, decode := attrs["gen_ai.latency.time_in_model_prefill"].AsFloat64(), attrs["gen_ai.latency.time_in_model_decode"].AsFloat64()
	if inf := attrs["gen_ai.latency.time_in_model_inference"].AsFloat64(); prefill <= 0 || decode <= 0 || !near(inf, prefill+decode) {
		t.Errorf("prefill %v decode %v inference %v", prefill, decode, inf)
	}
	if q := attrs["gen_ai.latency.time_in_queue"]; q.Type() != attribute.FLOAT64 || q.AsFloat64() < 0 {
		t.Errorf("time_in_queue %v", q.String())
	}
	if !sp.EndTime().After(sp.StartTime()) {
		t.Errorf("span %v..%v, want arrival before the end", sp.StartTime(), sp.EndTime())
	}
}

// TestLLMRequestSpanStreamed: a streamed request is traced when its last
// token is sent, and a request without trace headers starts a trace.
func TestLLMRequestSpanStreamed(t *testing.T) {
	rec := &spanRecorder{}
	s := startSim(t, func(o *Options) { o.TraceExporter = rec })
	code, body := postJSON(t, s.base+"/v1/chat/completions",
		`{"model":"`+modelName+`","messages":[{"role":"user","content":"hi"}],"max_tokens":3,"stream":true}`)
	if code != http.StatusOK || !strings.Contains(string(body), "[DONE]") {
		t.Fatalf("%d %s", code, body)
	}
	s.stop()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.spans) != 1 {
		t.Fatalf("%d spans exported, want 1", len(rec.spans))
	}
	if sp := rec.spans[0]; sp.Parent().IsValid() || !strings.HasPrefix(attrValue(sp, "gen_ai.request.id"), "chatcmpl-") {
		t.Errorf("span parent %v id %q, want a root span of a chat request", sp.Parent(), attrValue(sp, "gen_ai.request.id"))
	}
}

func attrValue(sp sdktrace.ReadOnlySpan, k attribute.Key) string {
	for _, kv := range sp.Attributes() {
		if kv.Key == k {
			return kv.Value.String()
		}
	}
	return ""
}
