package router

import (
	"bytes"
	"syscall"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/warmpath/warmpath/tests/harness"
)

// TestWorkerSpanJoinsRouterTrace runs a chat completion through the router
// to a vllm-sim exporting vLLM's llm_request span, over each protocol vLLM
// speaks, and checks the worker's span continues the router's trace: same
// trace id, a router span as parent, and the usage the client was told.
func TestWorkerSpanJoinsRouterTrace(t *testing.T) {
	for _, protocol := range []string{"grpc", "http/protobuf"} {
		t.Run(protocol, func(t *testing.T) {
			routerSpans, routerURL := harness.StartSpanReceiverHTTP(t)
			workerSpans, workerURL := routerSpans, routerURL // one collector for both, as in most deployments
			if protocol == "grpc" {
				workerSpans, workerURL = harness.StartSpanReceiverGRPC(t)
			}
			// The worker inherits the environment, as vLLM reads it.
			t.Setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", protocol)
			w := startWorker(t, "--otlp-traces-endpoint", workerURL)
			r := startRouter(t, []*worker{w}, "--otlp-endpoint", routerURL)

			c := openai.NewClient(option.WithBaseURL(r.url+"/v1/"), option.WithAPIKey("sim"), option.WithMaxRetries(0))
			resp, err := c.Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{
				Model:     simModel,
				Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("trace this request, please")},
				MaxTokens: openai.Int(4),
			})
			if err != nil {
				t.Fatal(err)
			}
			// Both flush their spans as they exit on SIGTERM.
			shutdown(t, r)
			stopWorker(t, w)

			llm := findSpan(workerSpans.Spans(), func(s harness.Span) bool { return s.Name == "llm_request" })
			if llm == nil {
				t.Fatalf("no llm_request span among the %d the worker exported", len(workerSpans.Spans()))
			}
			if llm.Kind != tracepb.Span_SPAN_KIND_SERVER || llm.Service != "vllm" {
				t.Errorf("llm_request kind %v service %q, want SERVER from vllm", llm.Kind, llm.Service)
			}
			parent := findSpan(routerSpans.Spans(), func(s harness.Span) bool {
				return s.Service != "vllm" && bytes.Equal(s.SpanId, llm.ParentSpanId)
			})
			if parent == nil {
				t.Fatalf("the llm_request span's parent %x is no router span (router sent %d)", llm.ParentSpanId, countRouterSpans(routerSpans.Spans()))
			}
			if !bytes.Equal(parent.TraceId, llm.TraceId) {
				t.Errorf("worker trace %x, router trace %x: the context did not propagate", llm.TraceId, parent.TraceId)
			}
			attrs := map[string]*commonpb.AnyValue{}
			for _, kv := range llm.Attributes {
				attrs[kv.Key] = kv.Value
			}
			if got := attrs["gen_ai.usage.prompt_tokens"].GetIntValue(); got != resp.Usage.PromptTokens {
				t.Errorf("prompt_tokens %d, response usage %d", got, resp.Usage.PromptTokens)
			}
			if got := attrs["gen_ai.usage.completion_tokens"].GetIntValue(); got != resp.Usage.CompletionTokens || got != 4 {
				t.Errorf("completion_tokens %d, response usage %d, want 4", got, resp.Usage.CompletionTokens)
			}
			if ttft := attrs["gen_ai.latency.time_to_first_token"].GetDoubleValue(); ttft <= 0 {
				t.Errorf("time_to_first_token %v, want positive seconds", ttft)
			}
			if id := attrs["gen_ai.request.id"].GetStringValue(); id != resp.ID {
				t.Errorf("gen_ai.request.id %q, response id %q", id, resp.ID)
			}
		})
	}
}

// stopWorker stops a worker with SIGTERM, as Kubernetes does, and waits
// for it to exit.
func stopWorker(t *testing.T, w *worker) {
	t.Helper()
	if err := w.proc.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	select {
	case <-w.proc.Done():
	case <-time.After(15 * time.Second):
		t.Fatal("worker still running 15s after SIGTERM")
	}
	if err := w.proc.Wait(); err != nil {
		t.Errorf("worker exit: %v", err)
	}
}

func findSpan(spans []harness.Span, match func(harness.Span) bool) *harness.Span {
	for i := range spans {
		if match(spans[i]) {
			return &spans[i]
		}
	}
	return nil
}

func countRouterSpans(spans []harness.Span) int {
	n := 0
	for _, s := range spans {
		if s.Service != "vllm" {
			n++
		}
	}
	return n
}
