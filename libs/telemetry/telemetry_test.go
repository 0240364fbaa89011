package telemetry

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
)

// serviceName is the service.name a provider built from cfg reports.
func serviceName(t *testing.T, cfg TracingConfig) string {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	cfg.Exporter = exp
	tp, shutdown, err := NewTracerProvider(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, sp := tp.Tracer("test").Start(context.Background(), "span")
	sp.End()
	if err := tp.(*sdktrace.TracerProvider).ForceFlush(t.Context()); err != nil {
		t.Fatal(err)
	}
	spans := exp.GetSpans() // before shutdown, which empties the exporter
	if err := shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	if len(spans) != 1 {
		t.Fatalf("%d spans exported, want 1", len(spans))
	}
	v, _ := spans[0].Resource.Set().Value(semconv.ServiceNameKey)
	return v.AsString()
}

func TestServiceName(t *testing.T) {
	t.Setenv("OTEL_SERVICE_NAME", "")
	if got := serviceName(t, TracingConfig{ServiceName: "vllm"}); got != "vllm" {
		t.Errorf("service.name %q, want the configured vllm", got)
	}
	t.Setenv("OTEL_SERVICE_NAME", "worker-a")
	if got := serviceName(t, TracingConfig{ServiceName: "vllm"}); got != "worker-a" {
		t.Errorf("service.name %q, want OTEL_SERVICE_NAME's worker-a", got)
	}
}

// TestSamplerFromEnvironment: a provider given no ratio samples as the
// OpenTelemetry environment says (OTEL_TRACES_SAMPLER, as vLLM's Python
// SDK reads it, and as the operator sets it for workers), else every
// trace; a ratio given in code wins over the environment.
func TestSamplerFromEnvironment(t *testing.T) {
	for _, tt := range []struct {
		name    string
		sampler string
		ratio   float64
		want    int
	}{
		{"no sampler set: all", "", 0, 1},
		{"the environment's: none", "parentbased_traceidratio", 0, 0},
		{"a ratio in code wins", "parentbased_traceidratio", 1, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("OTEL_TRACES_SAMPLER", tt.sampler)
			t.Setenv("OTEL_TRACES_SAMPLER_ARG", "0")
			exp := tracetest.NewInMemoryExporter()
			tp, shutdown, err := NewTracerProvider(t.Context(), TracingConfig{ServiceName: "s", Exporter: exp, SampleRatio: tt.ratio})
			if err != nil {
				t.Fatal(err)
			}
			_, sp := tp.Tracer("test").Start(context.Background(), "span")
			sp.End()
			if err := tp.(*sdktrace.TracerProvider).ForceFlush(t.Context()); err != nil {
				t.Fatal(err)
			}
			if got := len(exp.GetSpans()); got != tt.want {
				t.Errorf("%d spans exported, want %d", got, tt.want)
			}
			_ = shutdown(t.Context())
		})
	}
}
