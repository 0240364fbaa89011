package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/warmpath/warmpath/libs/kvevents"
	"github.com/warmpath/warmpath/services/cacheserver/internal/l2events"
	"github.com/warmpath/warmpath/services/cacheserver/internal/metrics"
)

// snapshotHandler is the snapshot endpoint of a running tracker, with the
// publisher's address for the "serving" log line.
type snapshotHandler struct {
	http.HandlerFunc
	addr string
}

// startKVEvents publishes src's changes on endpoint when it is set. It
// returns the snapshot handler (nil when off) and the function that stops
// the tracker, then closes the publisher.
func startKVEvents(ctx context.Context, endpoint, replay string, src l2events.Source, m *metrics.Metrics, log *slog.Logger) (http.Handler, func(), error) {
	if endpoint == "" {
		if replay != "" {
			return nil, nil, fmt.Errorf("--kv-events-replay-endpoint %q needs --kv-events-endpoint", replay)
		}
		return nil, func() {}, nil
	}
	cfg := kvevents.DefaultConfig()
	cfg.Endpoint, cfg.ReplayEndpoint = endpoint, replay
	// vLLM's current encoding (≥ 0.26); the router decodes both.
	pub, err := kvevents.NewPublisher(ctx, cfg, kvevents.MapEncoding, log)
	if err != nil {
		return nil, nil, fmt.Errorf("--kv-events-endpoint: %w", err)
	}
	tr := l2events.New(l2events.Config{}, src, pub, l2events.Counters{
		Published: m.KVEvents.Published, Dropped: m.KVEvents.Dropped, Unparsed: m.KVEvents.Unparsed,
	}, log)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tr.Run(runCtx)
	}()
	addr := endpoint
	if a := pub.Addr(); a != nil {
		addr = a.String()
	}
	stop := func() {
		cancel()
		<-done // its last pass publishes before the publisher closes
		if err := pub.Close(); err != nil {
			log.Warn("kv events: close", "err", err)
		}
	}
	return snapshotHandler{tr.ServeSnapshot, addr}, stop, nil
}

// kvEventsAddr is the publisher's address for the log, "" when off.
func kvEventsAddr(h http.Handler) string {
	if s, ok := h.(snapshotHandler); ok {
		return s.addr
	}
	return ""
}
