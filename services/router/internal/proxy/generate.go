package proxy

import (
	"bytes"
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
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/warmpath/warmpath/libs/openai"
	"github.com/warmpath/warmpath/services/router/internal/limiter"
	"github.com/warmpath/warmpath/services/router/internal/metrics"
	"github.com/warmpath/warmpath/services/router/internal/pool"
	"github.com/warmpath/warmpath/services/router/internal/strategy"
)

// requestIDHeader carries the request id to the worker and back.
const requestIDHeader = "X-Request-Id"

// exchange is one client request on its way through the router.
type exchange struct {
	c        *gin.Context
	id       string
	start    time.Time
	body     []byte
	parsed   *parsed
	routing  *Routing
	strategy string // strategy label for metrics
	base     *slog.Logger
	logger   *slog.Logger // built on first use: most requests log nothing
	span     trace.Span
	// cacheAware says the strategy chooses; otherwise (tokenize,
	// detokenize) the least-loaded worker is used and nothing is learnt.
	cacheAware bool
}

func (s *Server) generate(c *gin.Context) {
	x := &exchange{c: c, start: time.Now(), routing: s.routing.Load()}
	x.id = c.GetHeader(requestIDHeader)
	if x.id == "" {
		x.id = newRequestID()
	}
	c.Header(requestIDHeader, x.id)
	x.base = s.log
	path := c.Request.URL.Path
	x.cacheAware = path == "/v1/completions" || path == "/v1/chat/completions"
	x.strategy = x.routing.Strategy.Name()
	if !x.cacheAware {
		x.strategy = "leastloaded"
	}

	ctx := s.prop.Extract(c.Request.Context(), propagation.HeaderCarrier(c.Request.Header))
	ctx, x.span = s.tracer.Start(ctx, "router "+path, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("warmpath.request_id", x.id)))
	defer x.span.End()
	c.Request = c.Request.WithContext(ctx)

	status := s.serve(x)
	x.span.SetAttributes(attribute.Int("http.response.status_code", status))
	if status >= 500 {
		x.span.SetStatus(codes.Error, http.StatusText(status))
	}
	s.metrics.Duration.WithLabelValues(x.strategy).Observe(time.Since(x.start).Seconds())
}

// log returns the exchange's logger, carrying the request id and path.
func (x *exchange) log() *slog.Logger {
	if x.logger == nil {
		x.logger = x.base.With("request_id", x.id, "path", x.c.Request.URL.Path)
	}
	return x.logger
}

// serve handles one exchange and returns the status sent to the client.
func (s *Server) serve(x *exchange) int {
	c := x.c
	body, err := readBody(c.Writer, c.Request, s.cfg.MaxBodyBytes)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return s.reject(x, metrics.ReasonBodyTooLarge, openai.Errorf(http.StatusRequestEntityTooLarge, "request body exceeds %d bytes", tooBig.Limit))
		}
		return s.reject(x, metrics.ReasonBadRequest, openai.Errorf(http.StatusBadRequest, "read request body: %v", err))
	}
	x.body = body
	p, err := parseBody(body)
	if err != nil {
		var br *badRequest
		if errors.As(err, &br) {
			return s.reject(x, metrics.ReasonBadRequest, &openai.APIError{Status: http.StatusBadRequest, Type: openai.TypeBadRequest, Param: br.param, Message: br.msg})
		}
		return s.reject(x, metrics.ReasonBadRequest, openai.Errorf(http.StatusBadRequest, "%v", err))
	}
	x.parsed = p
	p.route.SessionKey = sessionKey(c.Request.Header, x.routing.SessionHeaders, p.user)
	x.span.SetAttributes(attribute.String("gen_ai.request.model", p.model), attribute.Bool("warmpath.stream", p.stream))

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

	release, err := s.limiter.Acquire(c.Request.Context())
	if err != nil {
		return s.overflow(x, err)
	}
	defer release()
	return s.route(x)
}

// readBody reads the request body under the size limit, allocating once
// when the client sent a Content-Length.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	rd := http.MaxBytesReader(w, r.Body, limit)
	if n := r.ContentLength; n > 0 && n <= limit {
		buf := make([]byte, n)
		if _, err := io.ReadFull(rd, buf); err != nil {
			return nil, err
		}
		// Reading past the declared length surfaces a lying client.
		if m, _ := rd.Read(make([]byte, 1)); m > 0 {
			return nil, errors.New("request body longer than its Content-Length")
		}
		return buf, nil
	}
	return io.ReadAll(rd)
}

// reject answers a request the router refuses itself.
func (s *Server) reject(x *exchange, reason string, e *openai.APIError) int {
	s.metrics.Rejections.WithLabelValues(reason).Inc()
	s.metrics.Requests.WithLabelValues("", x.strategy, metrics.Code(e.Status)).Inc()
	x.log().Info("rejected", "reason", reason, "status", e.Status, "err", e.Message)
	writeError(x.c, e)
	return e.Status
}

func (s *Server) overflow(x *exchange, err error) int {
	switch {
	case errors.Is(err, limiter.ErrOverflow), errors.Is(err, limiter.ErrQueueTimeout):
		reason := metrics.ReasonOverflow
		if errors.Is(err, limiter.ErrQueueTimeout) {
			reason = metrics.ReasonQueueTimeout
		}
		x.c.Header("Retry-After", "1")
		return s.reject(x, reason, openai.Errorf(s.limiter.Config().OverflowStatus, "router over capacity; retry later"))
	default: // the client went away while queued
		return 499
	}
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
	ctx := x.c.Request.Context()
	tried := map[string]bool{}
	var last *attemptResult
	for attempt := 0; ; attempt++ {
		eps, full := s.candidates(x.parsed.model, tried)
		if len(eps) == 0 {
			if full > 0 {
				// Every usable worker is at its own limit: wait for a slot.
				if err := s.limiter.WaitForChange(ctx); err != nil {
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
		lastAttempt := attempt >= s.cfg.MaxRetries
		res := s.forward(x, ep, lastAttempt)
		s.limiter.Notify()
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

// fail answers after the last attempt failed before any byte was sent.
func (s *Server) fail(x *exchange, res *attemptResult) int {
	e := openai.Errorf(http.StatusBadGateway, "worker %s: %v", res.worker, res.err)
	s.metrics.Requests.WithLabelValues(res.worker, x.strategy, metrics.Code(e.Status)).Inc()
	x.log().Warn("request failed", "worker", res.worker, "status", e.Status, "err", res.err)
	writeError(x.c, e)
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

// forward sends the request to ep and, unless it fails retryably before
// the first body byte, streams the answer to the client.
func (s *Server) forward(x *exchange, ep *pool.Endpoint, last bool) *attemptResult {
	release := ep.Acquire()
	defer release()
	c := x.c
	ctx, cancel := context.WithTimeout(c.Request.Context(), s.cfg.TotalTimeout)
	defer cancel()
	// One watchdog covers time-to-first-byte, then the idle gap between reads.
	var timedOut atomic.Bool
	watchdog := time.AfterFunc(s.cfg.TTFBTimeout, func() { timedOut.Store(true); cancel() })
	defer watchdog.Stop()

	target := ep.URL + c.Request.URL.Path
	if q := c.Request.URL.RawQuery; q != "" {
		target += "?" + q
	}
	req, err := http.NewRequestWithContext(ctx, c.Request.Method, target, bytes.NewReader(x.body))
	if err != nil {
		return &attemptResult{done: true, status: 500, worker: ep.URL, err: err}
	}
	copyEndToEnd(req.Header, c.Request.Header)
	req.Header.Set(requestIDHeader, x.id)
	req.Header.Del("Content-Length")
	req.ContentLength = int64(len(x.body))
	s.prop.Inject(ctx, propagation.HeaderCarrier(req.Header))

	resp, err := s.client.Do(req)
	if err != nil {
		return s.upstreamError(x, ep, err, timedOut.Load() || errors.Is(err, context.DeadlineExceeded))
	}
	defer resp.Body.Close()

	if (resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests) && !last {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		reason := metrics.ReasonUpstream429
		if resp.StatusCode >= 500 {
			reason = metrics.ReasonUpstream5xx
			s.recordFailure(ep)
		}
		return &attemptResult{worker: ep.URL, reason: reason, err: fmt.Errorf("status %d", resp.StatusCode)}
	}

	// Wait for the first body byte before committing headers, so a worker
	// that stalls in prefill still gets a clean 504.
	bufp := s.bufs.Get().(*[]byte)
	defer s.bufs.Put(bufp)
	buf := *bufp
	n, rerr := io.ReadAtLeast(resp.Body, buf[:1], 1)
	if rerr != nil && !errors.Is(rerr, io.EOF) && !errors.Is(rerr, io.ErrUnexpectedEOF) {
		return s.upstreamError(x, ep, rerr, timedOut.Load())
	}
	s.metrics.TTFT.WithLabelValues(x.strategy).Observe(time.Since(x.start).Seconds())
	watchdog.Reset(s.cfg.IdleTimeout)

	h := c.Writer.Header()
	copyEndToEnd(h, resp.Header)
	h.Set(requestIDHeader, x.id)
	c.Status(resp.StatusCode)
	c.Writer.WriteHeaderNow()
	streaming := strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")
	written := 0
	copyErr := func() error {
		if n > 0 {
			if _, err := c.Writer.Write(buf[:n]); err != nil {
				return clientError{err}
			}
			written += n
		}
		for {
			m, err := resp.Body.Read(buf)
			if m > 0 {
				watchdog.Reset(s.cfg.IdleTimeout)
				if _, werr := c.Writer.Write(buf[:m]); werr != nil {
					return clientError{werr}
				}
				written += m
				if streaming {
					c.Writer.Flush()
				}
			}
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				return err
			}
		}
	}()
	if streaming {
		c.Writer.Flush()
	}

	code := metrics.Code(resp.StatusCode)
	var ce clientError
	switch {
	case copyErr == nil:
		if resp.StatusCode < 500 {
			ep.RecordSuccess()
		} else {
			s.recordFailure(ep)
		}
	case errors.As(copyErr, &ce) || c.Request.Context().Err() != nil:
		// The client went away: not the worker's fault.
		code = "499"
		x.log().Info("client disconnected", "worker", ep.URL, "bytes", written)
	default:
		// The worker stalled or broke mid-stream; the status is already
		// sent, so the stream just ends early.
		s.recordFailure(ep)
		x.log().Warn("upstream stream broken", "worker", ep.URL, "idle_timeout", timedOut.Load(), "err", copyErr, "bytes", written)
		code = "502"
		if timedOut.Load() {
			code = "504"
		}
	}
	s.metrics.Requests.WithLabelValues(ep.URL, x.strategy, code).Inc()
	if x.base.Enabled(c.Request.Context(), slog.LevelDebug) {
		x.log().Debug("proxied", "worker", ep.URL, "status", resp.StatusCode, "bytes", written, "duration", time.Since(x.start))
	}
	return &attemptResult{done: true, status: resp.StatusCode, worker: ep.URL}
}

// clientError marks a failed write to the client.
type clientError struct{ error }

func (e clientError) Unwrap() error { return e.error }

// upstreamError classifies a failure before anything reached the client.
func (s *Server) upstreamError(x *exchange, ep *pool.Endpoint, err error, timedOut bool) *attemptResult {
	if x.c.Request.Context().Err() != nil {
		// The client left; answer nothing more.
		s.metrics.Requests.WithLabelValues(ep.URL, x.strategy, "499").Inc()
		return &attemptResult{done: true, status: 499, worker: ep.URL}
	}
	res := &attemptResult{worker: ep.URL, err: err, reason: metrics.ReasonUpstreamError}
	var opErr *net.OpError
	switch {
	case timedOut:
		// Past TTFB: the worker accepted the request, so retrying would
		// double the work; answer 504.
		s.recordFailure(ep)
		s.metrics.Requests.WithLabelValues(ep.URL, x.strategy, "504").Inc()
		writeError(x.c, openai.Errorf(http.StatusGatewayTimeout, "worker %s sent no response within %s", ep.URL, s.cfg.TTFBTimeout))
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
