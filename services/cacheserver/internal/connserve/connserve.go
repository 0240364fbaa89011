// Package connserve runs the accept loop the cache server's binary
// protocols (lm://, RESP) share: each connection on its own goroutine, and
// on shutdown every open connection closed and waited for, so no handler
// outlives the server.
package connserve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime/debug"
	"sync"
	"time"
)

// Backoff bounds between retries of a temporarily failing Accept: the
// values net/http uses.
const (
	minBackoff = 5 * time.Millisecond
	maxBackoff = time.Second
)

// Serve accepts connections on ln and runs handle on each until ctx ends;
// it then closes the listener and every open connection, waits for the
// handlers to return and returns nil. A temporary accept error (EMFILE,
// ENFILE: the process, not the listener, is at
// fault) is logged and retried after a backoff doubling from 5 ms to 1 s,
// as net/http does, so a burst of connections over the file limit costs
// delay, not the listener. Any other accept error is returned. A handler
// that panics is logged with its stack and its connection closed; the
// others go on. handle need not close its connection. log may be nil.
func Serve(ctx context.Context, ln net.Listener, log *slog.Logger, handle func(net.Conn)) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	stop := context.AfterFunc(ctx, func() { _ = ln.Close() })
	defer stop()
	var (
		mu    sync.Mutex
		conns = map[net.Conn]struct{}{}
		wg    sync.WaitGroup
		delay time.Duration
	)
	shutdown := func() error {
		mu.Lock()
		for c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
		return nil
	}
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return shutdown()
			}
			if !temporary(err) {
				return err
			}
			delay = nextBackoff(delay)
			log.Warn("accept failed; retrying", "addr", ln.Addr().String(), "err", err, "retry_in", delay)
			t := time.NewTimer(delay)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return shutdown()
			}
			continue
		}
		delay = 0
		mu.Lock()
		conns[conn] = struct{}{}
		mu.Unlock()
		wg.Go(func() {
			defer func() {
				// A bug in one connection's handling must not take the
				// process, and every other client, down with it.
				if r := recover(); r != nil {
					log.Error("panic serving a connection; closed it", "addr", ln.Addr().String(), "remote", conn.RemoteAddr().String(), "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
				}
				_ = conn.Close()
				mu.Lock()
				delete(conns, conn)
				mu.Unlock()
			}()
			handle(conn)
		})
	}
}

// temporary reports whether an accept error may go away by itself.
// net.Error's Temporary is deprecated for callers guessing about timeouts,
// but it is still what tells EMFILE and ENFILE apart from a broken
// listener, and net/http relies on it here.
func temporary(err error) bool {
	var t interface{ Temporary() bool }
	return errors.As(err, &t) && t.Temporary()
}

// nextBackoff doubles d within [minBackoff, maxBackoff].
func nextBackoff(d time.Duration) time.Duration {
	return min(max(2*d, minBackoff), maxBackoff)
}
