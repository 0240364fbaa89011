package harness

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// Span is one span a SpanReceiver was sent, with the service.name of the
// process that sent it.
type Span struct {
	Service string
	*tracepb.Span
}

// SpanReceiver is an OTLP trace collector for tests: it keeps every span
// sent to it over OTLP/HTTP (protobuf, uncompressed, as the Go exporter
// sends by default) or OTLP/gRPC, so a test can check what a binary
// exports without a real collector.
type SpanReceiver struct {
	coltrace.UnimplementedTraceServiceServer

	mu    sync.Mutex
	spans []Span
}

// StartSpanReceiverHTTP serves a receiver over OTLP/HTTP on loopback until
// the test ends; url is the traces endpoint to give an exporter, path
// included.
func StartSpanReceiverHTTP(t testing.TB) (r *SpanReceiver, url string) {
	t.Helper()
	r = &SpanReceiver{}
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return r, srv.URL + "/v1/traces"
}

// StartSpanReceiverGRPC serves a receiver over OTLP/gRPC (plaintext) on
// loopback until the test ends; url is http://host:port.
func StartSpanReceiverGRPC(t testing.TB) (r *SpanReceiver, url string) {
	t.Helper()
	var lc net.ListenConfig
	ln, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r = &SpanReceiver{}
	srv := grpc.NewServer()
	coltrace.RegisterTraceServiceServer(srv, r)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return r, "http://" + ln.Addr().String()
}

// Export implements the OTLP/gRPC TraceService.
func (r *SpanReceiver) Export(_ context.Context, req *coltrace.ExportTraceServiceRequest) (*coltrace.ExportTraceServiceResponse, error) {
	r.add(req)
	return &coltrace.ExportTraceServiceResponse{}, nil
}

// ServeHTTP is the OTLP/HTTP endpoint, on any path.
func (r *SpanReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	var msg coltrace.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(body, &msg)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.add(&msg)
	out, err := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func (r *SpanReceiver) add(req *coltrace.ExportTraceServiceRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.ResourceSpans {
		var service string
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.Key == "service.name" {
				service = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.ScopeSpans {
			for _, sp := range ss.Spans {
				r.spans = append(r.spans, Span{Service: service, Span: sp})
			}
		}
	}
}

// Spans returns every span received so far.
func (r *SpanReceiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.spans)
}
