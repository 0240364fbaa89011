// Package httpserve holds the HTTP server set-up and graceful shutdown that
// every warmpath API server shares.
package httpserve

import (
	"context"
	"log/slog"
	"net/http"
	"time"
)

// New returns a server for h with the header-read and idle timeouts every
// warmpath API uses; its own errors go to log at warn level.
func New(h http.Handler, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       120 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

// Shutdown stops hs accepting and lets in-flight requests (streams
// included) finish for up to grace; past it, the remaining connections are
// closed. ctx's values carry over, its cancellation does not (it is usually
// the context whose end triggered the shutdown).
func Shutdown(ctx context.Context, hs *http.Server, grace time.Duration, log *slog.Logger) {
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace)
	defer cancel()
	if err := hs.Shutdown(shutdownCtx); err != nil {
		log.Warn("shutdown grace period over; closing remaining connections", "err", err)
		_ = hs.Close()
	}
}
