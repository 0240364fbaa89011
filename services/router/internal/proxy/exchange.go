package proxy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/warmpath/warmpath/libs/openai"
	"github.com/warmpath/warmpath/services/router/internal/limiter"
	"github.com/warmpath/warmpath/services/router/internal/metrics"
	"github.com/warmpath/warmpath/services/router/internal/pool"
	"github.com/warmpath/warmpath/services/router/internal/tokenizer"
	"github.com/warmpath/warmpath/services/router/strategy"
)

// requestIDHeader carries the request id to the worker and back.
const requestIDHeader = "X-Request-Id"

// exchange is one client request on its way through the router: parsed
// (here), routed to a worker (route.go), forwarded (forward.go) and, for a
// response that outlives the handler, streamed (stream.go). Whatever the
// outcome, it ends once, in Server.settle.
type exchange struct {
	fc       *fasthttp.RequestCtx // valid only until the handler returns
	ctx      context.Context      //nolint:containedctx // the request's context: tracing, client disconnect, total timeout
	cancel   context.CancelFunc
	path     string
	uri      string
	id       string
	start    time.Time
	header   http.Header // end-to-end headers for the worker
	body     []byte
	parsed   *parsed
	routing  *Routing
	strategy string // strategy label for metrics
	base     *slog.Logger
	logger   *slog.Logger // built on first use: most requests log nothing
	span     trace.Span
	release  func() // the limiter slot, once held
	// cacheAware says the strategy chooses; otherwise (tokenize,
	// detokenize) the least-loaded worker is used and nothing is learnt.
	cacheAware bool
	// streamed says the response body goes out after the handler returns
	// (stream.go), which then settles the exchange.
	streamed bool
	// tokenized says tokenization was tried (once per request, not per
	// attempt).
	tokenized bool
	// late is the rest of a long prompt being encoded in the background
	// while the request, routed on its head, goes ahead; nil otherwise.
	late *tokenizer.Pending

	// tries are the attempts so far, in order; settle judges the workers
	// by them.
	tries []try
	// excluded are the workers not to choose again: tried, or gone from
	// the pool since the candidates were listed.
	excluded map[string]bool
}

// try is one attempt at a worker and how it ended.
type try struct {
	ep *pool.Endpoint
	// failure is how it failed; "" when the worker's answer went to the
	// client (ok says whether that answer was a success).
	failure Failure
	ok      bool
	// broken says the answer began but the worker broke it off, stalled
	// or timed out: the worker's failure, and never retried.
	broken bool
}

// failedAfterReaching says the worker had the request and failed it: it
// broke its answer off, lost the connection after the request was sent,
// or answered 5xx (a refusal is not a failure).
func (t try) failedAfterReaching() bool {
	return t.broken || t.failure == FailReset || t.failure == Fail5xx
}

// outcome is how an exchange ended, for settle.
type outcome struct {
	status int    // sent to the client; 499 when the client left first
	worker string // the worker whose answer (or failure) it was; "" if none
}

func (s *Server) generate(fc *fasthttp.RequestCtx, path string) {
	x := &exchange{fc: fc, path: path, start: time.Now(), routing: s.routing.Load(), base: s.log}
	x.uri = path
	if q := fc.URI().QueryString(); len(q) > 0 {
		x.uri += "?" + string(q)
	}
	x.id = string(fc.Request.Header.Peek(requestIDHeader))
	if x.id == "" {
		x.id = newRequestID()
	}
	fc.Response.Header.Set(requestIDHeader, x.id)
	x.cacheAware = path == "/v1/completions" || path == "/v1/chat/completions"
	x.strategy = x.routing.Strategy.Name()
	if !x.cacheAware {
		x.strategy = strategy.NameLeastLoaded
	}

	ctx := s.prop.Extract(context.Background(), headerCarrier{&fc.Request.Header})
	ctx, x.span = s.tracer.Start(ctx, "router "+path, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("warmpath.request_id", x.id)))
	x.ctx, x.cancel = context.WithTimeout(ctx, s.cfg.TotalTimeout)
	x.header = requestHeaders(&fc.Request.Header)
	x.header.Set(requestIDHeader, x.id)
	s.prop.Inject(x.ctx, propagation.HeaderCarrier(x.header))

	watch := watchDisconnect(fc.Conn(), s.cfg.DisconnectCheckDelay, x.cancel)
	o := s.serveExchange(x)
	if watch.stop() {
		// The watch read a byte of the client's next request, which the
		// server can no longer see: this response must be the last.
		fc.SetConnectionClose()
	}
	if !x.streamed {
		s.settle(x, o)
	}
	x.fc = nil
}

// settle ends an exchange, whatever its outcome: the request counter, the
// workers' health (judged from every attempt), the span, the limiter slot
// and the context. Every way out of a request comes through here once.
func (s *Server) settle(x *exchange, o outcome) {
	s.metrics.Requests.WithLabelValues(o.worker, x.strategy, metrics.Code(o.status)).Inc()
	s.judge(x)
	x.span.SetAttributes(attribute.Int("http.response.status_code", o.status))
	if o.status >= 500 {
		x.span.SetStatus(codes.Error, http.StatusText(o.status))
	}
	s.metrics.Duration.WithLabelValues(x.strategy).Observe(time.Since(x.start).Seconds())
	if x.release != nil {
		x.release()
	}
	x.cancel()
	x.span.End()
}

// judge records each attempt's result against its worker. Failures count
// toward ejection unless the request failed, after reaching them, on every
// one of two or more workers it tried: then the request is the problem,
// not the workers, and counting it would let a few bad requests eject the
// fleet. Connect failures always count: no request causes them.
func (s *Server) judge(x *exchange) {
	reached, succeeded := 0, false
	for _, t := range x.tries {
		switch {
		case t.ok:
			succeeded = true
		case t.failedAfterReaching():
			reached++
		}
	}
	requestAtFault := !succeeded && reached >= 2
	for _, t := range x.tries {
		switch {
		case t.ok:
			t.ep.RecordSuccess()
		case t.failure == FailConnect:
			s.recordFailure(t.ep)
		case t.failedAfterReaching():
			if !requestAtFault {
				s.recordFailure(t.ep)
			}
		}
	}
	if requestAtFault {
		s.metrics.RequestFaults.Inc()
		x.log().Warn("request failed on every worker it reached; not counted against them", "workers", reached)
	}
}

func (s *Server) recordFailure(ep *pool.Endpoint) {
	if s.pool.RecordFailure(ep, s.cfg.Ejection, time.Now()) {
		s.metrics.Ejections.WithLabelValues(ep.URL).Inc()
		s.log.Warn("worker ejected", "worker", ep.URL, "until", ep.EjectedUntil())
	}
}

// log returns the exchange's logger, carrying the request id and path.
func (x *exchange) log() *slog.Logger {
	if x.logger == nil {
		x.logger = x.base.With("request_id", x.id, "path", x.path)
	}
	return x.logger
}

// serveExchange parses the request, checks a worker could serve it, takes
// a limiter slot and routes it.
func (s *Server) serveExchange(x *exchange) outcome {
	// Not copied: everything that reads the body (and the parsed fields,
	// which point into it) is done before the handler returns, after which
	// fasthttp reuses the buffer. Strategies must not keep request strings
	// past Pick (strategy.Request).
	x.body = x.fc.PostBody()
	p, err := parseBody(x.body)
	if err != nil {
		var br *badRequest
		if errors.As(err, &br) {
			return s.reject(x, metrics.ReasonBadRequest, &openai.APIError{Status: http.StatusBadRequest, Type: openai.TypeBadRequest, Param: br.param, Message: br.msg})
		}
		return s.reject(x, metrics.ReasonBadRequest, openai.Errorf(http.StatusBadRequest, "%v", err))
	}
	x.parsed = p
	p.route.SessionKey = sessionKey(x.header, x.routing.SessionHeaders, p.user)
	if x.span.IsRecording() {
		// The exporter keeps attributes past the handler: copy.
		x.span.SetAttributes(attribute.String("gen_ai.request.model", strings.Clone(p.model)), attribute.Bool("warmpath.stream", p.stream))
	}

	serving, available, unknown := s.census(p.model)
	if serving == 0 && unknown > 0 {
		// Whether the model exists is not known yet: a retry will tell.
		return s.reject(x, metrics.ReasonNoWorker, openai.Errorf(http.StatusServiceUnavailable,
			"the workers' models are not known yet; retry"))
	}
	if serving == 0 {
		return s.reject(x, metrics.ReasonUnknownModel, &openai.APIError{Status: http.StatusNotFound, Type: openai.TypeNotFound, Param: "model",
			Message: fmt.Sprintf("The model `%s` does not exist.", p.model)})
	}
	if available == 0 && !s.panics(serving, available) {
		return s.reject(x, metrics.ReasonNoWorker, openai.Errorf(http.StatusServiceUnavailable, "no healthy worker serves model %q", p.model))
	}

	// A request a peer relayed holds a slot at that peer: counting it
	// here too would halve the endpoint's limit for a popular prompt.
	if !s.fromPeer(x) {
		release, err := s.limiter.Acquire(x.ctx)
		if err != nil {
			return s.overflow(x, err)
		}
		x.release = release
	}
	if o, ok := s.relayToOwner(x); ok {
		return o
	}
	return s.route(x)
}

// reject answers a request the router refuses itself.
func (s *Server) reject(x *exchange, reason string, e *openai.APIError) outcome {
	s.metrics.Rejections.WithLabelValues(reason).Inc()
	x.log().Info("rejected", "reason", reason, "status", e.Status, "err", e.Message)
	writeFastError(x.fc, e)
	return outcome{status: e.Status}
}

// overflow answers a request that got no capacity: the router's own, or
// (MaxPerWorker) its workers'.
func (s *Server) overflow(x *exchange, err error) outcome {
	switch {
	case errors.Is(err, limiter.ErrOverflow), errors.Is(err, limiter.ErrQueueTimeout):
		reason := metrics.ReasonOverflow
		if errors.Is(err, limiter.ErrQueueTimeout) {
			reason = metrics.ReasonQueueTimeout
		}
		x.fc.Response.Header.Set("Retry-After", "1")
		return s.reject(x, reason, openai.Errorf(s.limiter.Config().OverflowStatus, "router over capacity; retry later"))
	default: // the client went away while queued
		return s.clientGone(x, "")
	}
}

// clientGone ends an exchange whose client left: nothing more is sent.
func (s *Server) clientGone(x *exchange, worker string) outcome {
	x.fc.SetConnectionClose()
	return outcome{status: statusClientGone, worker: worker}
}

// statusClientGone is nginx's code for a request whose client closed the
// connection before the answer; it is never sent, only counted.
const statusClientGone = 499

// sessionKey reads the first non-empty configured header, then the body's
// user field.
func sessionKey(h http.Header, headers []string, user string) string {
	for _, name := range headers {
		if v := strings.TrimSpace(h.Get(name)); v != "" {
			return v
		}
	}
	return user
}

func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
