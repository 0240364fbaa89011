package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/warmpath/warmpath/libs/openai"
	"github.com/warmpath/warmpath/services/router/internal/pool"
	"github.com/warmpath/warmpath/services/router/internal/upstream"
)

// attempt is the result of one forward.
type attempt struct {
	try
	// done says the client was answered (or left): outcome says how.
	// Otherwise nothing reached the client, try.failure says what went
	// wrong, and the request may go to another worker.
	done    bool
	outcome outcome
	err     error
}

// bufferLimit is the largest non-streamed response body the handler reads
// whole before answering; larger or unsized ones are streamed.
const bufferLimit = 1 << 20

// forward sends the request to ep and, unless it fails retryably before
// the first body byte, answers the client: a non-streamed response read
// whole and sent in one write, an event stream (or a large body) handed to
// the server as a body stream that is flushed per read. final says no
// other attempt follows, so the worker's refusal or 5xx goes to the client
// as it is.
//
// epRelease frees the worker slot the caller acquired; forward owns it.
func (s *Server) forward(x *exchange, ep *pool.Endpoint, epRelease func(), final bool) *attempt {
	handedOff := false
	defer func() {
		if !handedOff {
			epRelease()
			s.limiter.Notify()
		}
	}()
	a := &attempt{try: try{ep: ep}}
	t, err := s.target(ep.URL)
	if err != nil {
		a.failure, a.err = FailConnect, err
		return a
	}
	ttfbAt := time.Now().Add(s.cfg.TTFBTimeout)
	resp, err := s.client.Do(x.ctx, t, &upstream.Request{
		Method: http.MethodPost, URI: x.uri, Header: x.header, Body: x.body,
		HeadTimeout: s.cfg.TTFBTimeout,
	})
	if err != nil {
		return s.upstreamError(x, a, err, final)
	}
	body := resp.Body
	defer func() {
		if !handedOff {
			_ = body.Close()
		}
	}()

	a.failure = statusFailure(resp.StatusCode, resp.Header.Get("Retry-After"))
	if a.failure != "" && !final && s.cfg.RetryOn.Has(a.failure) {
		body.SetReadTimeout(s.cfg.IdleTimeout)
		_, _ = io.Copy(io.Discard, io.LimitReader(body, 64<<10))
		a.err = fmt.Errorf("status %d", resp.StatusCode)
		return a
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
		return s.upstreamError(x, a, rerr, final)
	}
	s.metrics.TTFT.WithLabelValues(x.strategy).Observe(time.Since(x.start).Seconds())
	body.SetReadTimeout(s.cfg.IdleTimeout)
	a.done = true
	a.outcome = outcome{status: resp.StatusCode, worker: ep.URL}

	streaming := strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")
	if streaming || resp.ContentLength < 0 || resp.ContentLength > bufferLimit {
		x.fc.SetStatusCode(resp.StatusCode)
		copyResponseHeaders(&x.fc.Response.Header, resp.Header)
		x.fc.Response.Header.Set(requestIDHeader, x.id)
		st := &bodyStream{s: s, x: x, ep: ep, epRelease: epRelease, body: body, bufp: bufp,
			pending: buf[:n], eof: errors.Is(rerr, io.EOF), conn: x.fc.Conn(), status: resp.StatusCode}
		if streaming && !st.eof {
			// The first bytes stay in the buffer the cutter reads into.
			st.events, st.pending = newEventCutter(body, buf[:n]), nil
		}
		size := -1
		if !streaming && resp.ContentLength >= 0 {
			size = int(resp.ContentLength)
		}
		x.fc.Response.SetBodyStream(st, size)
		x.streamed, handedOff = true, true
		return a
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
			a.failure = ""
			a.outcome = s.clientGone(x, ep.URL)
			return a
		}
		a.broken = true
		status := http.StatusBadGateway
		if errors.Is(rerr, upstream.ErrTimeout) || errors.Is(rerr, context.DeadlineExceeded) {
			status = http.StatusGatewayTimeout
		}
		x.log().Warn("upstream response broken", "worker", ep.URL, "status", status, "err", rerr)
		writeFastError(x.fc, openai.Errorf(status, "worker %s: response body: %v", ep.URL, rerr))
		a.outcome.status = status
		return a
	}
	x.fc.SetStatusCode(resp.StatusCode)
	copyResponseHeaders(&out.Header, resp.Header)
	out.Header.Set(requestIDHeader, x.id)
	a.ok = resp.StatusCode < 500
	if x.base.Enabled(x.ctx, slog.LevelDebug) {
		x.log().Debug("proxied", "worker", ep.URL, "status", resp.StatusCode, "bytes", len(out.Body()), "duration", time.Since(x.start))
	}
	return a
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

// upstreamError classifies a failure before anything reached the client:
// the client left (done, nothing sent), the worker stalled past TTFB
// (done, 504: it has the request, so sending it elsewhere would double
// the work; unless RetryOn has FailTimeout and another attempt may
// follow), or a failure route may retry.
func (s *Server) upstreamError(x *exchange, a *attempt, err error, final bool) *attempt {
	a.err = err
	cerr := x.ctx.Err()
	if cerr != nil && !errors.Is(cerr, context.DeadlineExceeded) {
		a.done, a.failure, a.outcome = true, "", s.clientGone(x, a.ep.URL)
		return a
	}
	var opErr *net.OpError
	switch {
	case cerr == nil && errors.Is(err, upstream.ErrTimeout) && !final && s.cfg.RetryOn.Has(FailTimeout):
		// The worker's failure (broken), and route tries another.
		a.failure, a.broken = FailTimeout, true
	case errors.Is(err, upstream.ErrTimeout) || cerr != nil:
		limit := s.cfg.TTFBTimeout
		if cerr != nil {
			limit = s.cfg.TotalTimeout
		}
		a.done, a.failure, a.broken = true, "", true
		a.outcome = outcome{status: http.StatusGatewayTimeout, worker: a.ep.URL}
		x.log().Warn("worker timed out", "worker", a.ep.URL, "limit", limit, "err", err)
		writeFastError(x.fc, openai.Errorf(http.StatusGatewayTimeout, "worker %s sent no response within %s", a.ep.URL, limit))
	case errors.As(err, &opErr) && opErr.Op == "dial", errors.Is(err, upstream.ErrNotSent):
		a.failure = FailConnect
	default:
		// The whole request was sent: the worker may have run it.
		a.failure = FailReset
	}
	return a
}
