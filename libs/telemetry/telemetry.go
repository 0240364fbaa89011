// Package telemetry sets up what every warmpath service logs and traces
// with: a structured slog logger and an OpenTelemetry tracer provider
// (OTLP over HTTP when an endpoint is configured) with W3C trace-context
// propagation.
package telemetry

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// NewLogger returns a slog logger writing to w at level ("debug", "info",
// "warn", "error") in format ("json" or "text").
func NewLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("telemetry: log level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("telemetry: log format must be json or text, got %q", format)
}

// TracingConfig configures tracing.
type TracingConfig struct {
	ServiceName string
	// OTLPEndpoint is an OTLP/HTTP collector URL (e.g.
	// http://otel-collector:4318). Empty falls back to the standard
	// OTEL_EXPORTER_OTLP_ENDPOINT variables; with neither, spans are
	// created and propagated but not exported.
	OTLPEndpoint string
	// SampleRatio of root spans to sample (1 = all); parents' decisions win.
	SampleRatio float64
	// Exporter overrides the OTLP exporter (tests use an in-memory one).
	Exporter sdktrace.SpanExporter
}

// SetupTracing installs a global tracer provider and the W3C propagator.
// The returned shutdown flushes pending spans. Without an exporter the
// provider is a no-op: spans cost nothing, and a caller's trace context
// still passes through to downstream requests unchanged.
func SetupTracing(ctx context.Context, cfg TracingConfig) (trace.TracerProvider, func(context.Context) error, error) {
	exp := cfg.Exporter
	envSet := os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
	if exp == nil && (cfg.OTLPEndpoint != "" || envSet) {
		var opts []otlptracehttp.Option
		if cfg.OTLPEndpoint != "" {
			opts = append(opts, otlptracehttp.WithEndpointURL(cfg.OTLPEndpoint))
		}
		e, err := otlptracehttp.New(ctx, opts...)
		if err != nil {
			return nil, nil, fmt.Errorf("telemetry: otlp exporter: %w", err)
		}
		exp = e
	}
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	if exp == nil {
		tp := noop.NewTracerProvider()
		otel.SetTracerProvider(tp)
		return tp, func(context.Context) error { return nil }, nil
	}
	ratio := cfg.SampleRatio
	if ratio <= 0 {
		ratio = 1
	}
	res, err := resource.Merge(resource.Default(), resource.NewWithAttributes(semconv.SchemaURL, semconv.ServiceName(cfg.ServiceName)))
	if err != nil {
		res = resource.Default()
	}
	opts := []sdktrace.TracerProviderOption{
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))),
	}
	opts = append(opts, sdktrace.WithBatcher(exp))
	tp := sdktrace.NewTracerProvider(opts...)
	otel.SetTracerProvider(tp)
	return tp, tp.Shutdown, nil
}
