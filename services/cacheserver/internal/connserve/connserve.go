// Package connserve runs the accept loop the cache server's binary
// protocols (lm://, RESP) share: each connection on its own goroutine, and
// on shutdown every open connection closed and waited for, so no handler
// outlives the server.
package connserve

import (
	"context"
	"net"
	"sync"
)

// Serve accepts connections on ln and runs handle on each until ctx ends;
// it then closes the listener and every open connection, waits for the
// handlers to return and returns nil. An accept error before that is
// returned as is. handle need not close its connection.
func Serve(ctx context.Context, ln net.Listener, handle func(net.Conn)) error {
	stop := context.AfterFunc(ctx, func() { _ = ln.Close() })
	defer stop()
	var (
		mu    sync.Mutex
		conns = map[net.Conn]struct{}{}
		wg    sync.WaitGroup
	)
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() == nil {
				return err
			}
			mu.Lock()
			for c := range conns {
				_ = c.Close()
			}
			mu.Unlock()
			wg.Wait()
			return nil
		}
		mu.Lock()
		conns[conn] = struct{}{}
		mu.Unlock()
		wg.Go(func() {
			defer func() {
				_ = conn.Close()
				mu.Lock()
				delete(conns, conn)
				mu.Unlock()
			}()
			handle(conn)
		})
	}
}
