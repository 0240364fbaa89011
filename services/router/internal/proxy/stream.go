package proxy

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

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
	conn      net.Conn
	status    int
	renewAt   time.Time // when the client write deadline is next renewed
	written   int
	eof       bool  // the worker's body ended
	err       error // the worker's body broke
	closed    bool
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
	n, err := b.body.Read(p)
	b.written += n
	switch {
	case errors.Is(err, io.EOF):
		b.eof = true
	case err != nil:
		b.err = err
	}
	return n, err
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
		// is already sent, so the stream just ends early.
		err := b.err
		if err == nil {
			err = werr
		}
		timedOut := errors.Is(err, upstream.ErrTimeout) || errors.Is(err, context.DeadlineExceeded)
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
