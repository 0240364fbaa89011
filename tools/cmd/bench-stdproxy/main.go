// Command bench-stdproxy is the plain Go reverse proxy bench-router measures
// as its "stdlib" target: net/http/httputil.ReverseProxy balancing round-robin
// over --workers, with a Transport tuned like the router's (keep-alive, 256
// idle connections per worker, no compression) and every write flushed at
// once, so SSE passes as it arrives. It does nothing else (no routing, no
// metrics, no logging per request), which makes it the floor any
// net/http-based Go proxy starts from. GET /ready answers 200.
//
//	bench-stdproxy --listen 127.0.0.1:8080 --workers http://127.0.0.1:9001,http://127.0.0.1:9002
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "bench-stdproxy:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("bench-stdproxy", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:8080", "address to listen on")
	workers := fs.String("workers", "", "comma-separated worker base URLs (http://host:port)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	targets, err := parseWorkers(*workers)
	if err != nil {
		return err
	}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /ready", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	proxy := newProxy(targets)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		// The worker answers as soon as it has the body, while the transport
		// may still be finishing its write; without full duplex the server
		// closes the inbound body when the reply's headers go out, the
		// write fails and the upstream connection and reply are cut
		// (golang/go#40747).
		_ = http.NewResponseController(w).EnableFullDuplex()
		proxy.ServeHTTP(w, r)
	})
	srv := &http.Server{Addr: *listen, Handler: mux, ReadHeaderTimeout: 10 * time.Second}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutCtx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	return srv.Shutdown(shutCtx)
}

func parseWorkers(s string) ([]*url.URL, error) {
	var out []*url.URL
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		u, err := url.Parse(f)
		if err != nil || u.Scheme == "" || u.Host == "" {
			return nil, fmt.Errorf("--workers: %q is not a base URL", f)
		}
		out = append(out, u)
	}
	if len(out) == 0 {
		return nil, errors.New("--workers: need at least one worker URL")
	}
	return out, nil
}

// newProxy returns a ReverseProxy sending each request to the next target.
func newProxy(targets []*url.URL) *httputil.ReverseProxy {
	var next atomic.Uint64
	return &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(targets[(next.Add(1)-1)%uint64(len(targets))])
		},
		Transport: &http.Transport{
			Proxy:               nil,
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:        1024,
			MaxIdleConnsPerHost: 256,
			IdleConnTimeout:     90 * time.Second,
			DisableCompression:  true,
			WriteBufferSize:     64 << 10,
			ReadBufferSize:      64 << 10,
		},
		FlushInterval: -1, // flush after every write: SSE events pass at once
		BufferPool:    newBufferPool(),
	}
}

// bufferPool hands ReverseProxy 32 KiB copy buffers, as the router pools its own.
type bufferPool struct{ p sync.Pool }

func newBufferPool() *bufferPool {
	return &bufferPool{p: sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}}
}

func (b *bufferPool) Get() []byte  { return *b.p.Get().(*[]byte) }
func (b *bufferPool) Put(x []byte) { b.p.Put(&x) }
