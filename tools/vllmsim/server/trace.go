package server

import (
	"context"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/warmpath/warmpath/tools/vllmsim/engine"
)

// Span and attribute names of vLLM's per-request span
// (vllm/tracing.py's SpanAttributes, exported by
// vllm/v1/engine/output_processor.py's do_tracing).
const (
	spanName                 = "llm_request"
	attrResponseModel        = "gen_ai.response.model"
	attrRequestID            = "gen_ai.request.id"
	attrTopP                 = "gen_ai.request.top_p"
	attrMaxTokens            = "gen_ai.request.max_tokens"
	attrTemperature          = "gen_ai.request.temperature"
	attrN                    = "gen_ai.request.n"
	attrPromptTokens         = "gen_ai.usage.prompt_tokens"
	attrCompletionTokens     = "gen_ai.usage.completion_tokens"
	attrTimeInQueue          = "gen_ai.latency.time_in_queue"
	attrTimeToFirstToken     = "gen_ai.latency.time_to_first_token"
	attrE2E                  = "gen_ai.latency.e2e"
	attrTimeInModelPrefill   = "gen_ai.latency.time_in_model_prefill"
	attrTimeInModelDecode    = "gen_ai.latency.time_in_model_decode"
	attrTimeInModelInference = "gen_ai.latency.time_in_model_inference"
)

// arrival is when a request reached the engine: wall time for the span's
// start, engine seconds for its latencies.
type arrival struct {
	wall time.Time
	sim  float64
}

// traceFinished exports the llm_request span of a finished request, as
// vLLM does: kind SERVER, from arrival to now, continuing the trace the
// request's traceparent/tracestate headers name (only those: vLLM reads
// no baggage). The span's times are wall times, so it nests under the
// caller's; the latency attributes are engine (modelled GPU) seconds, the
// same numbers simmetrics observes, so they agree with /metrics whatever
// --time-scale is.
func (s *Server) traceFinished(ctx context.Context, h http.Header, j *job, at arrival, st engine.Stats) {
	if s.cfg.Tracer == nil {
		return
	}
	parent := propagation.TraceContext{}.Extract(context.WithoutCancel(ctx), propagation.HeaderCarrier(h))
	attrs := []attribute.KeyValue{
		attribute.String(attrResponseModel, j.model),
		attribute.String(attrRequestID, j.id),
		attribute.Int(attrPromptTokens, st.PromptTokens),
		attribute.Int(attrCompletionTokens, st.OutputTokens),
		attribute.Float64(attrTimeInQueue, st.QueueSeconds),
		attribute.Float64(attrTimeToFirstToken, st.FirstToken-at.sim),
		attribute.Float64(attrE2E, st.Finished-at.sim),
		attribute.Float64(attrTimeInModelPrefill, st.PrefillSeconds),
		attribute.Float64(attrTimeInModelDecode, st.DecodeSeconds),
		attribute.Float64(attrTimeInModelInference, st.PrefillSeconds+st.DecodeSeconds),
	}
	// vLLM adds the sampling parameters only when truthy, after its
	// defaults (top_p 1, temperature 1, n 1) are applied.
	topP, temperature := 1.0, 1.0
	if p := j.params.TopP; p != nil {
		topP = *p
	}
	if t := j.params.Temperature; t != nil {
		temperature = *t
	}
	if topP != 0 {
		attrs = append(attrs, attribute.Float64(attrTopP, topP))
	}
	if temperature != 0 {
		attrs = append(attrs, attribute.Float64(attrTemperature, temperature))
	}
	attrs = append(attrs, attribute.Int(attrMaxTokens, j.maxTokens), attribute.Int(attrN, 1))
	_, sp := s.cfg.Tracer.Start(parent, spanName, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithTimestamp(at.wall), trace.WithAttributes(attrs...))
	sp.End()
}
