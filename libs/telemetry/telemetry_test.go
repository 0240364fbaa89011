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
