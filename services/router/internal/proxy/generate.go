package proxy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
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
	"github.com/warmpath/warmpath/services/router/internal/upstream"
	"github.com/warmpath/warmpath/services/router/strategy"
)

// requestIDHeader carries the request id to the worker and back.
const requestIDHeader = "X-Request-Id"

// exchange is one client request on its way through the router. It ends
// in Server.finish: in the handler, or, for a response streamed after the
// handler returned, when the stream closes.
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
	// (stream.go), which then finishes the exchange.
	streamed bool
	// tokenized says tokenization was tried (once per request, not per
	// attempt).
	tokenized bool
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
		x.strategy = "leastloaded"
	}

	ctx := s.prop.Extract(context.Background(), headerCarrier{&fc.Request.Header})
	ctx, x.span = s.tracer.Start(ctx, "router "+path, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("warmpath.request_id", x.id)))
	x.ctx, x.cancel = context.WithTimeout(ctx, s.cfg.TotalTimeout)
	x.header = requestHeaders(&fc.Request.Header)
	x.header.Set(requestIDHeader, x.id)
	s.prop.Inject(x.ctx, propagation.HeaderCarrier(x.header))

	watch := watchDisconnect(fc.Conn(), s.cfg.DisconnectCheckDelay, x.cancel)
	status := s.serveExchange(x)
	if watch.stop() {
		// The watch read a byte of the client's next request, which the
		// server can no longer see: this response must be the last.
		fc.SetConnectionClose()
	}
	if !x.streamed {
		s.finish(x, status)
	}
	x.fc = nil
}

// finish ends an exchange: its metrics, span, limiter slot and context.
func (s *Server) finish(x *exchange, status int) {
	x.span.SetAttributes(attribute.Int("http.response.status_code", status))
	if status >= 500 {
		x.span.SetStatus(codes.Error, http.StatusText(status))
	}
	s.metrics.Duration.WithLabelValues(x.strategy).Observe(time.Since(x.start).Seconds())
	if x.release != nil {
		x.release()
	}
	x.cancel()
	x.span.End()
}

// log returns the exchange's logger, carrying the request id and path.
func (x *exchange) log() *slog.Logger {
	if x.logger == nil {
		x.logger = x.base.With("request_id", x.id, "path", x.path)
	}
	return x.logger
}

// serveExchange handles one exchange and returns the status sent to the
// client.
func (s *Server) serveExchange(x *exchange) int {
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

	known, healthy := false, false
	for _, ep := range s.pool.All() {
		if ep.Serves(p.model) {
			known = true
			healthy = healthy || ep.Available()
		}
	}
	switch {
	case !known:
		return s.reject(x, metrics.ReasonUnknownModel, &openai.APIError{Status: http.StatusNotFound, Type: openai.TypeNotFound, Param: "model",
			Message: fmt.Sprintf("The model `%s` does not exist.", p.model)})
	case !healthy:
		return s.reject(x, metrics.ReasonNoWorker, openai.Errorf(http.StatusServiceUnavailable, "no healthy worker serves model %q", p.model))
	}

	release, err := s.limiter.Acquire(x.ctx)
	if err != nil {
		return s.overflow(x, err)
	}
	x.release = release
	return s.route(x)
}

// reject answers a request the router refuses itself.
func (s *Server) reject(x *exchange, reason string, e *openai.APIError) int {
	s.metrics.Rejections.WithLabelValues(reason).Inc()
	s.metrics.Requests.WithLabelValues("", x.strategy, metrics.Code(e.Status)).Inc()
	x.log().Info("rejected", "reason", reason, "status", e.Status, "err", e.Message)
	writeFastError(x.fc, e)
	return e.Status
}

func (s *Server) overflow(x *exchange, err error) int {
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
func (s *Server) clientGone(x *exchange, worker string) int {
	s.metrics.Requests.WithLabelValues(worker, x.strategy, "499").Inc()
	x.fc.SetConnectionClose()
	return 499
}

// candidates returns the endpoints a request may go to now, and how many
// more would qualify but are at their per-worker limit.
func (s *Server) candidates(model string, tried map[string]bool) (eps []strategy.Endpoint, full int) {
	for _, ep := range s.pool.All() {
		if tried[ep.URL] || !ep.Available() || !ep.Serves(model) {
			continue
		}
		inflight := ep.InFlight()
		if s.cfg.MaxPerWorker > 0 && inflight >= s.cfg.MaxPerWorker {
			full++
			continue
		}
		st := ep.Stats()
		eps = append(eps, strategy.Endpoint{
			ID: ep.URL, InFlight: inflight, Running: st.Running, Waiting: st.Waiting, External: st.External(),
			KVCacheUsage: st.KVCacheUsage, BlockSize: st.BlockSize, NumGPUBlocks: st.NumGPUBlocks,
			PendingPrefill: ep.PendingPrefill(),
		})
	}
	return eps, full
}

func leastLoaded(eps []strategy.Endpoint) strategy.Decision {
	best := eps[0]
	for _, e := range eps[1:] {
		if e.Load() < best.Load() {
			best = e
		}
	}
	return strategy.Decision{Endpoint: best.ID, Strategy: "leastloaded"}
}

// route picks workers and forwards until one answers, retrying on another
// worker while nothing has reached the client.
func (s *Server) route(x *exchange) int {
	ctx := x.ctx
	tried := map[string]bool{}
	var last *attemptResult
	for attempt := 0; ; attempt++ {
		// Taken before looking, so a slot freed while we look wakes us.
		var changed <-chan struct{}
		if s.cfg.MaxPerWorker > 0 {
			changed = s.limiter.Changed()
		}
		eps, full := s.candidates(x.parsed.model, tried)
		if len(eps) == 0 {
			if full > 0 {
				// Every usable worker is at its own limit: wait for a slot.
				if err := s.limiter.WaitForChange(ctx, changed); err != nil {
					return s.overflow(x, err)
				}
				attempt--
				continue
			}
			if last != nil {
				return s.fail(x, last)
			}
			return s.reject(x, metrics.ReasonNoWorker, openai.Errorf(http.StatusServiceUnavailable, "no healthy worker serves model %q", x.parsed.model))
		}
		if x.cacheAware && !x.tokenized {
			x.tokenized = true
			if s.tokenize(x, eps) {
				// Tokenizing took a round trip: look at the workers' load
				// again, or every request of a burst would see the loads
				// from before it.
				eps, _ = s.candidates(x.parsed.model, tried)
				if len(eps) == 0 {
					attempt--
					continue
				}
			}
		}
		t0 := time.Now()
		var dec strategy.Decision
		if x.cacheAware {
			var err error
			dec, err = x.routing.Strategy.Pick(&x.parsed.route, eps)
			if err != nil {
				return s.reject(x, metrics.ReasonNoWorker, openai.Errorf(http.StatusServiceUnavailable, "routing: %v", err))
			}
			if dec.Strategy != "" {
				x.strategy = dec.Strategy
			}
			s.metrics.MatchRatio.WithLabelValues(x.strategy).Observe(dec.MatchRatio)
		} else {
			dec = leastLoaded(eps)
		}
		s.metrics.DecisionDuration.WithLabelValues(x.strategy).Observe(time.Since(t0).Seconds())
		ep := s.pool.Get(dec.Endpoint)
		if ep == nil { // removed since the snapshot
			tried[dec.Endpoint] = true
			attempt--
			continue
		}
		x.span.SetAttributes(attribute.String("warmpath.strategy", x.strategy), attribute.String("warmpath.worker", ep.URL),
			attribute.Int("warmpath.match_chunks", dec.MatchedChunks), attribute.Int("warmpath.prompt_chunks", dec.TotalChunks),
			attribute.Int("warmpath.attempt", attempt))
		epRelease, ok := ep.TryAcquire(s.cfg.MaxPerWorker)
		if !ok {
			// Another request took the worker's last slot since the
			// snapshot: wait for a slot, then choose again.
			if err := s.limiter.WaitForChange(ctx, changed); err != nil {
				return s.overflow(x, err)
			}
			attempt--
			continue
		}
		lastAttempt := attempt >= s.cfg.MaxRetries
		// forward returns once the first body byte is in (or the attempt
		// failed): the worker's prefill of this prompt is over either way.
		prefillDone := ep.StartPrefill(dec.PrefillTokens)
		res := s.forward(x, ep, epRelease, lastAttempt)
		prefillDone()
		if res.done {
			return res.status
		}
		last = res
		tried[ep.URL] = true
		if lastAttempt {
			return s.fail(x, res)
		}
		s.metrics.Retries.WithLabelValues(res.reason).Inc()
		x.log().Warn("retrying on another worker", "worker", ep.URL, "reason", res.reason, "err", res.err)
	}
}

// tokenize fills the request's token ids for a strategy that routes on
// them, asking the least-loaded candidate. A failure leaves them empty:
// the strategy then routes without them, never failing the request.
// It reports whether it asked (the candidates' loads may have moved).
func (s *Server) tokenize(x *exchange, eps []strategy.Endpoint) bool {
	tu, ok := x.routing.Strategy.(strategy.TokenUser)
	if !ok || !tu.WantsTokens() || s.tok == nil || len(x.parsed.route.TokenIDs) > 0 {
		return false
	}
	ids, cached, err := s.tok.Tokenize(x.ctx, leastLoaded(eps).Endpoint, &x.parsed.route)
	switch {
	case err != nil:
		s.metrics.Tokenize.WithLabelValues("error").Inc()
		x.log().Warn("tokenize failed; routing without token ids", "err", err)
	case cached:
		s.metrics.Tokenize.WithLabelValues("cached").Inc()
	default:
		s.metrics.Tokenize.WithLabelValues("tokenized").Inc()
	}
	x.parsed.route.TokenIDs = ids
	return !cached
}

// fail answers after the last attempt failed before any byte was sent.
func (s *Server) fail(x *exchange, res *attemptResult) int {
	e := openai.Errorf(http.StatusBadGateway, "worker %s: %v", res.worker, res.err)
	s.metrics.Requests.WithLabelValues(res.worker, x.strategy, metrics.Code(e.Status)).Inc()
	x.log().Warn("request failed", "worker", res.worker, "status", e.Status, "err", res.err)
	writeFastError(x.fc, e)
	return e.Status
}

// attemptResult is the outcome of one forward. done means the response (or
// an error) was written to the client; otherwise it may be retried.
type attemptResult struct {
	done   bool
	status int
	worker string
	reason string
	err    error
}

// bufferLimit is the largest non-streamed response body the handler reads
// whole before answering; larger or unsized ones are streamed.
const bufferLimit = 1 << 20

// forward sends the request to ep and, unless it fails retryably before
// the first body byte, answers the client: a non-streamed response read
// whole and sent in one write, an event stream (or a large body) handed to
// the server as a body stream that is flushed per read.
//
// epRelease frees the worker slot the caller acquired; forward owns it.
func (s *Server) forward(x *exchange, ep *pool.Endpoint, epRelease func(), last bool) *attemptResult {
	handedOff := false
	defer func() {
		if !handedOff {
			epRelease()
			s.limiter.Notify()
		}
	}()
	t, err := s.target(ep.URL)
	if err != nil {
		return &attemptResult{worker: ep.URL, reason: metrics.ReasonConnectError, err: err}
	}
	ttfbAt := time.Now().Add(s.cfg.TTFBTimeout)
	resp, err := s.client.Do(x.ctx, t, &upstream.Request{
		Method: http.MethodPost, URI: x.uri, Header: x.header, Body: x.body,
		HeadTimeout: s.cfg.TTFBTimeout,
	})
	if err != nil {
		return s.upstreamError(x, ep, err)
	}
	body := resp.Body
	defer func() {
		if !handedOff {
			_ = body.Close()
		}
	}()

	if (resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests) && !last {
		body.SetReadTimeout(s.cfg.IdleTimeout)
		_, _ = io.Copy(io.Discard, io.LimitReader(body, 64<<10))
		reason := metrics.ReasonUpstream429
		if resp.StatusCode >= 500 {
			reason = metrics.ReasonUpstream5xx
			s.recordFailure(ep)
		}
		return &attemptResult{worker: ep.URL, reason: reason, err: fmt.Errorf("status %d", resp.StatusCode)}
	}

	// Wait for the first body byte before committing the status, so a
	// worker that stalls in prefill still gets a clean 504.
	bufp := s.bufs.Get().(*[]byte)
	defer func() {
		if !handedOff {
			s.bufs.Put(bufp)
		}
	}()
	buf := *bufp
	var n int
	var rerr error
	for n == 0 && rerr == nil {
		left := time.Until(ttfbAt)
		if left <= 0 {
			rerr = upstream.ErrTimeout
			break
		}
		body.SetReadTimeout(left)
		n, rerr = body.Read(buf)
	}
	if rerr != nil && !errors.Is(rerr, io.EOF) {
		return s.upstreamError(x, ep, rerr)
	}
	s.metrics.TTFT.WithLabelValues(x.strategy).Observe(time.Since(x.start).Seconds())
	body.SetReadTimeout(s.cfg.IdleTimeout)

	streaming := strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")
	if streaming || resp.ContentLength < 0 || resp.ContentLength > bufferLimit {
		x.fc.SetStatusCode(resp.StatusCode)
		copyResponseHeaders(&x.fc.Response.Header, resp.Header)
		x.fc.Response.Header.Set(requestIDHeader, x.id)
		st := &bodyStream{s: s, x: x, ep: ep, epRelease: epRelease, body: body, bufp: bufp,
			pending: buf[:n], eof: errors.Is(rerr, io.EOF), conn: x.fc.Conn(), status: resp.StatusCode}
		size := -1
		if !streaming && resp.ContentLength >= 0 {
			size = int(resp.ContentLength)
		}
		x.fc.Response.SetBodyStream(st, size)
		x.streamed, handedOff = true, true
		return &attemptResult{done: true, status: resp.StatusCode, worker: ep.URL}
	}

	// A sized, small answer: read it whole, then send it in one write.
	out := &x.fc.Response
	out.AppendBody(buf[:n])
	for rerr == nil {
		n, rerr = body.Read(buf)
		out.AppendBody(buf[:n])
	}
	if !errors.Is(rerr, io.EOF) {
		// Nothing has reached the client yet, so it gets an error rather
		// than a truncated body; the worker did the work, so no retry.
		out.ResetBody()
		if x.ctx.Err() != nil && !errors.Is(x.ctx.Err(), context.DeadlineExceeded) {
			return &attemptResult{done: true, status: s.clientGone(x, ep.URL), worker: ep.URL}
		}
		s.recordFailure(ep)
		status := http.StatusBadGateway
		if errors.Is(rerr, upstream.ErrTimeout) || errors.Is(rerr, context.DeadlineExceeded) {
			status = http.StatusGatewayTimeout
		}
		s.metrics.Requests.WithLabelValues(ep.URL, x.strategy, metrics.Code(status)).Inc()
		x.log().Warn("upstream response broken", "worker", ep.URL, "status", status, "err", rerr)
		writeFastError(x.fc, openai.Errorf(status, "worker %s: response body: %v", ep.URL, rerr))
		return &attemptResult{done: true, status: status, worker: ep.URL}
	}
	x.fc.SetStatusCode(resp.StatusCode)
	copyResponseHeaders(&out.Header, resp.Header)
	out.Header.Set(requestIDHeader, x.id)
	if resp.StatusCode < 500 {
		ep.RecordSuccess()
	} else {
		s.recordFailure(ep)
	}
	s.metrics.Requests.WithLabelValues(ep.URL, x.strategy, metrics.Code(resp.StatusCode)).Inc()
	if x.base.Enabled(x.ctx, slog.LevelDebug) {
		x.log().Debug("proxied", "worker", ep.URL, "status", resp.StatusCode, "bytes", len(out.Body()), "duration", time.Since(x.start))
	}
	return &attemptResult{done: true, status: resp.StatusCode, worker: ep.URL}
}

// target returns the parsed address of a worker URL, cached: the URL is
// parsed once per worker, not per request.
func (s *Server) target(workerURL string) (upstream.Target, error) {
	if t, ok := s.targets.Load(workerURL); ok {
		return t.(upstream.Target), nil
	}
	t, err := upstream.ParseTarget(workerURL)
	if err != nil {
		return t, err
	}
	s.targets.Store(workerURL, t)
	return t, nil
}

// upstreamError classifies a failure before anything reached the client.
func (s *Server) upstreamError(x *exchange, ep *pool.Endpoint, err error) *attemptResult {
	cerr := x.ctx.Err()
	if cerr != nil && !errors.Is(cerr, context.DeadlineExceeded) {
		// The client left; answer nothing more.
		return &attemptResult{done: true, status: s.clientGone(x, ep.URL), worker: ep.URL}
	}
	res := &attemptResult{worker: ep.URL, err: err, reason: metrics.ReasonUpstreamError}
	var opErr *net.OpError
	switch {
	case errors.Is(err, upstream.ErrTimeout) || cerr != nil:
		// Past TTFB (or the total timeout): the worker accepted the
		// request, so retrying would double the work; answer 504.
		s.recordFailure(ep)
		s.metrics.Requests.WithLabelValues(ep.URL, x.strategy, "504").Inc()
		limit := s.cfg.TTFBTimeout
		if cerr != nil {
			limit = s.cfg.TotalTimeout
		}
		writeFastError(x.fc, openai.Errorf(http.StatusGatewayTimeout, "worker %s sent no response within %s", ep.URL, limit))
		return &attemptResult{done: true, status: http.StatusGatewayTimeout, worker: ep.URL}
	case errors.As(err, &opErr) && opErr.Op == "dial":
		res.reason = metrics.ReasonConnectError
	}
	s.recordFailure(ep)
	return res
}

func (s *Server) recordFailure(ep *pool.Endpoint) {
	if ep.RecordFailure(s.cfg.Ejection, time.Now()) {
		s.metrics.Ejections.WithLabelValues(ep.URL).Inc()
		s.log.Warn("worker ejected", "worker", ep.URL, "until", ep.EjectedUntil())
	}
}

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
