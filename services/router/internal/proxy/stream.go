package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/warmpath/warmpath/libs/openai"
	"github.com/warmpath/warmpath/services/router/internal/pool"
	"github.com/warmpath/warmpath/services/router/internal/upstream"
)

// bodyStream carries a worker's response body to the client after the
// handler returned: fasthttp reads it and, for a chunked (event-stream)
// body, flushes every read, so each SSE event leaves as it arrives. When
// fasthttp is done — at the end, or because the client write failed — it
// calls CloseWithError, which ends the exchange.
type bodyStream struct {
	s         *Server
	x         *exchange
	ep        *pool.Endpoint
	epRelease func()
	body      *upstream.Body
	bufp      *[]byte
	pending   []byte // read before the hand-off (the first bytes)
	// events, for an event stream, reads the worker's body in whole
	// events, so that a break can be told with an error event (tail).
	events  *eventCutter
	tail    []byte // the error event and [DONE] still to send
	conn    net.Conn
	status  int
	renewAt time.Time // when the client write deadline is next renewed
	written int
	eof     bool  // the worker's body ended
	err     error // the worker's body broke
	closed  bool
}

// Read returns the worker's next bytes. Before each, it gives the client
// IdleTimeout to take the previous ones: a client that stops reading
// cannot hold a worker slot for ever.
func (b *bodyStream) Read(p []byte) (int, error) {
	if len(b.pending) > 0 {
		n := copy(p, b.pending)
		b.pending = b.pending[n:]
		b.written += n
		return n, nil
	}
	if b.eof {
		return 0, io.EOF
	}
	// Renewed at most every eighth of the timeout, as the worker's read
	// deadline is (upstream.Body.Read).
	if now := time.Now(); b.conn != nil && !now.Before(b.renewAt) {
		_ = b.conn.SetWriteDeadline(now.Add(b.s.cfg.IdleTimeout))
		b.renewAt = now.Add(b.s.cfg.IdleTimeout / 8)
	}
	if b.err != nil { // an event stream broke: its error event, then the end
		if len(b.tail) == 0 {
			return 0, io.EOF
		}
		n := copy(p, b.tail)
		b.tail = b.tail[n:]
		return n, nil
	}
	var src io.Reader = b.body
	if b.events != nil {
		src = b.events
	}
	n, err := src.Read(p)
	b.written += n
	switch {
	case errors.Is(err, io.EOF):
		b.eof = true
	case err != nil:
		b.err = err
		if b.events != nil {
			b.tail = errorEvent(err, b.written, b.s.cfg.IdleTimeout, !b.events.Clean())
			return n, nil // n is 0: the cutter returns its error alone
		}
	}
	return n, err
}

// errorEvent is what ends an event stream the worker broke (or left
// silent) after its status was sent: an OpenAI-style error event and
// [DONE], as vLLM ends a stream its engine failed; unterminated first
// ends an oversize event the client got part of.
func errorEvent(err error, written int, idle time.Duration, unterminated bool) []byte {
	e := openai.Errorf(http.StatusBadGateway, "the worker's stream broke after %d bytes: %v", written, err)
	if isTimeout(err) {
		e = openai.Errorf(http.StatusGatewayTimeout, "the worker sent nothing for %v, after %d bytes", idle, written)
	}
	payload, _ := json.Marshal(e.Body())
	var out []byte
	if unterminated {
		out = append(out, "\n\n"...)
	}
	out = append(out, "data: "...)
	out = append(out, payload...)
	return append(out, "\n\ndata: [DONE]\n\n"...)
}

// isTimeout says err is the worker's body timing out.
func isTimeout(err error) bool {
	return errors.Is(err, upstream.ErrTimeout) || errors.Is(err, context.DeadlineExceeded)
}

// CloseWithError is called by fasthttp once, when it stops reading: werr
// is nil after a complete response, else why it stopped. It settles the
// exchange, judging the worker by how its stream ended.
func (b *bodyStream) CloseWithError(werr error) error {
	if b.closed {
		return nil
	}
	b.closed = true
	s, x := b.s, b.x
	if b.conn != nil {
		_ = b.conn.SetWriteDeadline(time.Time{})
	}
	o := outcome{status: b.status, worker: b.ep.URL}
	t := &x.tries[len(x.tries)-1]
	switch {
	case werr == nil && b.err == nil:
		t.ok = b.status < 500
	case b.err == nil && !b.eof:
		// The client went away (or stopped reading): not the worker's
		// fault. Closing the worker connection below stops its work.
		o.status, t.failure = statusClientGone, ""
		x.log().Info("client disconnected", "worker", b.ep.URL, "bytes", b.written, "err", werr)
	default:
		// The worker stalled, broke or ended short mid-stream; the status
		// is already sent, so the stream ends early (an event stream with
		// an error event).
		err := b.err
		if err == nil {
			err = werr
		}
		timedOut := isTimeout(err)
		t.broken = true
		x.log().Warn("upstream stream broken", "worker", b.ep.URL, "timeout", timedOut, "err", err, "bytes", b.written)
		o.status = http.StatusBadGateway
		if timedOut {
			o.status = http.StatusGatewayTimeout
		}
	}
	_ = b.body.Close()
	b.epRelease()
	s.limiter.Notify()
	s.bufs.Put(b.bufp)
	if x.base.Enabled(x.ctx, slog.LevelDebug) {
		x.log().Debug("proxied", "worker", b.ep.URL, "status", b.status, "bytes", b.written, "duration", time.Since(x.start))
	}
	s.settle(x, o)
	return nil
}
