package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/warmpath/warmpath/libs/kvevents"
	"github.com/warmpath/warmpath/libs/kvevents/kvzmq"
	"github.com/warmpath/warmpath/services/cacheserver/internal/l2events"
	"github.com/warmpath/warmpath/services/cacheserver/internal/metrics"
)

// kvEvents is the running KV event publisher of --kv-events-endpoint; its
// zero value is "off".
type kvEvents struct {
	snapshot http.Handler // nil when off
	addr     string       // the PUB socket's address, for the log; "" when off
	stop     func()       // stops the tracker, then closes the publisher
}

// startKVEvents publishes src's changes on endpoint when it is set.
func startKVEvents(ctx context.Context, endpoint, replay string, src l2events.Source, m *metrics.Metrics, log *slog.Logger) (kvEvents, error) {
	off := kvEvents{stop: func() {}}
	if endpoint == "" {
		if replay != "" {
			return off, fmt.Errorf("--kv-events-replay-endpoint %q needs --kv-events-endpoint", replay)
		}
		return off, nil
	}
	cfg := kvzmq.DefaultConfig()
	cfg.Endpoint, cfg.ReplayEndpoint = endpoint, replay
	// vLLM's current encoding (≥ 0.26); the router decodes both.
	pub, err := kvzmq.NewPublisher(ctx, cfg, kvevents.MapEncoding, log)
	if err != nil {
		return off, fmt.Errorf("--kv-events-endpoint: %w", err)
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
	return kvEvents{snapshot: http.HandlerFunc(tr.ServeSnapshot), addr: addr, stop: stop}, nil
}
