package proxy

import (
	"net"
	"sync"
	"time"
)

// disconnectWatch notices a client that goes away while its request waits
// in the router's queue or in the worker's prefill, so the worker stops
// work nobody will read.
//
// The server does not read a connection while its handler runs, so a
// closed client shows only on the next write — which, for a request still
// waiting for its first token, may be minutes away. The watch reads the
// client connection itself, but only once the request has lasted `after`:
// requests that finish sooner never start its goroutine, which keeps the
// fast path free of the extra scheduler wake-ups that net/http's
// background read costs on every request.
type disconnectWatch struct {
	conn   net.Conn
	cancel func()
	timer  *time.Timer

	mu       sync.Mutex // orders run's deadline reset before stop's expiry
	started  bool
	stopping bool
	done     chan struct{}
	// consumed is set when the read returned a byte: the client sent more
	// (a pipelined request), which the server can no longer see, so the
	// connection must close after this response.
	consumed bool
}

// watchDisconnect calls cancel if conn's peer closes after `after` and
// before stop.
func watchDisconnect(conn net.Conn, after time.Duration, cancel func()) *disconnectWatch {
	w := &disconnectWatch{conn: conn, cancel: cancel, done: make(chan struct{})}
	if conn != nil {
		w.timer = time.AfterFunc(after, w.run)
	}
	return w
}

func (w *disconnectWatch) run() {
	w.mu.Lock()
	if w.stopping {
		w.mu.Unlock()
		return
	}
	w.started = true
	// The server's request read timeout is still armed; clear it, or a
	// long prefill would look like a client that left.
	_ = w.conn.SetReadDeadline(time.Time{})
	w.mu.Unlock()
	defer close(w.done)
	var b [1]byte
	n, err := w.conn.Read(b[:])
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case n > 0:
		w.consumed = true
	case err != nil && !w.stopping:
		w.cancel()
	}
}

// stop ends the watch before the handler returns (the server reads the
// connection again after it) and reports whether it consumed a byte.
func (w *disconnectWatch) stop() (consumed bool) {
	if w.timer == nil {
		return false
	}
	w.timer.Stop()
	w.mu.Lock()
	w.stopping = true
	started := w.started
	if started {
		_ = w.conn.SetReadDeadline(time.Unix(1, 0))
	}
	w.mu.Unlock()
	if !started {
		return false
	}
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.consumed
}
