// Package telemetry sets up what every warmpath service logs, traces and
// measures with: a structured slog logger, an OpenTelemetry tracer provider
// (OTLP over HTTP or gRPC when an endpoint is configured) with W3C
// trace-context propagation, and a Prometheus registry with the runtime
// collectors.
package telemetry

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
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

// Protocol is an OTLP transport, spelled as OTEL_EXPORTER_OTLP_TRACES_PROTOCOL
// spells it.
type Protocol string

// The OTLP transports an exporter can speak.
const (
	ProtocolHTTP Protocol = "http/protobuf"
	ProtocolGRPC Protocol = "grpc"
)

// TracesProtocolEnv names the variable choosing the trace exporter's
// transport.
const TracesProtocolEnv = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"

// ParseProtocol accepts the transports the exporters here speak;
// anything else (http/json, a typo, "") is an error rather than a silent
// fallback, so a misconfigured collector shows at start.
func ParseProtocol(s string) (Protocol, error) {
	switch p := Protocol(s); p {
	case ProtocolHTTP, ProtocolGRPC:
		return p, nil
	}
	return "", fmt.Errorf("telemetry: unsupported OTLP protocol %q (want %s or %s)", s, ProtocolGRPC, ProtocolHTTP)
}

// TracesProtocolFromEnv is the transport TracesProtocolEnv names, def
// when it is unset; lookup is os.LookupEnv outside tests.
func TracesProtocolFromEnv(lookup func(string) (string, bool), def Protocol) (Protocol, error) {
	v, ok := lookup(TracesProtocolEnv)
	if !ok {
		return def, nil
	}
	p, err := ParseProtocol(v)
	if err != nil {
		return "", fmt.Errorf("%s: %w", TracesProtocolEnv, err)
	}
	return p, nil
}

// TracingConfig configures tracing.
type TracingConfig struct {
	// ServiceName is the service.name resource attribute unless
	// OTEL_SERVICE_NAME (or OTEL_RESOURCE_ATTRIBUTES) sets one.
	ServiceName string
	// OTLPEndpoint is a collector URL (e.g. http://otel-collector:4318
	// for OTLP/HTTP, http://otel-collector:4317 for gRPC; an https URL
	// uses TLS). Empty falls back to the standard
	// OTEL_EXPORTER_OTLP_ENDPOINT variables; with neither, spans are
	// created and propagated but not exported.
	OTLPEndpoint string
	// Protocol is the exporter's transport; empty means ProtocolHTTP.
	Protocol Protocol
	// SampleRatio of root spans to sample (1 = all); parents' decisions
	// win. 0 leaves it to OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG,
	// and with neither samples all.
	SampleRatio float64
	// Exporter overrides the OTLP exporter (tests use an in-memory one).
	Exporter sdktrace.SpanExporter
}

// SetupTracing installs NewTracerProvider's provider globally, with the
// W3C propagator.
func SetupTracing(ctx context.Context, cfg TracingConfig) (trace.TracerProvider, func(context.Context) error, error) {
	tp, shutdown, err := NewTracerProvider(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	otel.SetTracerProvider(tp)
	return tp, shutdown, nil
}

// NewTracerProvider returns a tracer provider exporting over OTLP, without
// touching the globals (a process may hold one per component). The
// returned shutdown flushes pending spans. Without an exporter the
// provider is a no-op: spans cost nothing, and a caller's trace context
// still passes through to downstream requests unchanged.
func NewTracerProvider(ctx context.Context, cfg TracingConfig) (trace.TracerProvider, func(context.Context) error, error) {
	exp := cfg.Exporter
	envSet := os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
	if exp == nil && (cfg.OTLPEndpoint != "" || envSet) {
		e, err := newExporter(ctx, cfg.Protocol, cfg.OTLPEndpoint)
		if err != nil {
			return nil, nil, fmt.Errorf("telemetry: otlp exporter: %w", err)
		}
		exp = e
	}
	if exp == nil {
		return noop.NewTracerProvider(), func(context.Context) error { return nil }, nil
	}
	// Later detectors win: the environment names the service over the
	// caller's default, as the OpenTelemetry SDKs do.
	res, err := resource.New(ctx, resource.WithTelemetrySDK(),
		resource.WithAttributes(semconv.ServiceName(cfg.ServiceName)), resource.WithFromEnv())
	if err != nil {
		res = resource.Default()
	}
	opts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res), sdktrace.WithBatcher(exp)}
	switch {
	case cfg.SampleRatio > 0:
		opts = append(opts, sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.SampleRatio))))
	case os.Getenv("OTEL_TRACES_SAMPLER") == "":
		opts = append(opts, sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample())))
		// Otherwise the SDK builds the sampler OTEL_TRACES_SAMPLER and
		// OTEL_TRACES_SAMPLER_ARG name, as vLLM's Python SDK does.
	}
	tp := sdktrace.NewTracerProvider(opts...)
	return tp, tp.Shutdown, nil
}

// newExporter returns an OTLP exporter speaking p to endpoint (empty:
// the exporter's own environment variables). A URL's path is used as
// given and its scheme picks TLS (https) or plaintext; a gRPC endpoint
// may also be a bare host:port, plaintext.
func newExporter(ctx context.Context, p Protocol, endpoint string) (sdktrace.SpanExporter, error) {
	switch p {
	case "", ProtocolHTTP:
		var opts []otlptracehttp.Option
		if endpoint != "" {
			opts = append(opts, otlptracehttp.WithEndpointURL(endpoint))
		}
		return otlptracehttp.New(ctx, opts...)
	case ProtocolGRPC:
		var opts []otlptracegrpc.Option
		switch {
		case strings.Contains(endpoint, "://"):
			opts = append(opts, otlptracegrpc.WithEndpointURL(endpoint))
		case endpoint != "":
			opts = append(opts, otlptracegrpc.WithEndpoint(endpoint), otlptracegrpc.WithInsecure())
		}
		return otlptracegrpc.New(ctx, opts...)
	}
	_, err := ParseProtocol(string(p))
	return nil, err
}
