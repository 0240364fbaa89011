package kvredis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"
)

// ErrUnavailable marks every error of a Redis call that failed or that the
// open breaker refused: the caller answers from its own view instead.
var ErrUnavailable = errors.New("kvredis: redis unavailable")

// Ops, the values of the errors metric's op label.
const (
	opLookup  = "lookup"
	opCommit  = "commit"
	opForget  = "forget"
	opCollect = "collect"
	opResync  = "resync"
	opStats   = "stats"
)

// guard runs every Redis call under a deadline and one circuit breaker,
// so a hung or lost Redis costs the first few calls their timeout and the
// rest nothing until a probe after BreakerOpen finds it back.
type guard struct {
	cb      *gobreaker.CircuitBreaker[struct{}]
	timeout time.Duration
	errs    *prometheus.CounterVec
	open    prometheus.Gauge
	log     *slog.Logger

	mu     sync.Mutex
	logged map[string]time.Time // op -> last error logged
	quiet  map[string]int       // op -> errors not logged since
	every  time.Duration
}

func newGuard(cfg Config) *guard {
	g := &guard{
		timeout: cfg.Timeout,
		log:     cfg.Log,
		logged:  map[string]time.Time{},
		quiet:   map[string]int{},
		every:   cfg.LogEvery,
		errs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warmpath_router_kv_redis_errors_total",
			Help: "Calls to the Redis-shared KV index that failed or that the open breaker refused, by op (lookup, commit, forget, collect, resync, stats).",
		}, []string{"op"}),
		open: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "warmpath_router_kv_redis_breaker_open",
			Help: "1 while the Redis breaker is open or half-open (calls fail fast; lookups use the replica's own index), 0 when closed.",
		}),
	}
	for _, op := range []string{opLookup, opCommit, opForget, opCollect, opResync, opStats} {
		g.errs.WithLabelValues(op) // exported at 0 from the start
	}
	failures := uint32(cfg.BreakerFailures)
	g.cb = gobreaker.NewCircuitBreaker[struct{}](gobreaker.Settings{
		Name:    "kvredis",
		Timeout: cfg.BreakerOpen,
		// Consecutive failures, not a ratio: lookups are many and commits
		// few, and either failing in a row says Redis is gone.
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= failures },
		OnStateChange: func(_ string, from, to gobreaker.State) {
			v := 0.0
			if to != gobreaker.StateClosed {
				v = 1
			}
			g.open.Set(v)
			g.log.Warn("kv redis: breaker "+to.String(), "from", from.String())
		},
	})
	if cfg.Registerer != nil {
		cfg.Registerer.MustRegister(g.errs, g.open)
	}
	return g
}

// do runs fn under the breaker with a deadline of n timeouts. Every error
// is counted, logged (rate-limited) and wraps ErrUnavailable.
func (g *guard) do(op string, n int, fn func(ctx context.Context) error) error {
	_, err := g.cb.Execute(func() (struct{}, error) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(n)*g.timeout)
		defer cancel()
		if err := fn(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return struct{}{}, err
		}
		return struct{}{}, nil
	})
	if err == nil {
		return nil
	}
	err = fmt.Errorf("%w: %s: %w", ErrUnavailable, op, err)
	g.failed(op, err)
	return err
}

// failed counts err and logs it, at most once per op and LogEvery: while
// Redis is down every request fails, and the log must stay readable.
func (g *guard) failed(op string, err error) {
	g.errs.WithLabelValues(op).Inc()
	now := time.Now()
	g.mu.Lock()
	if now.Sub(g.logged[op]) < g.every {
		g.quiet[op]++
		g.mu.Unlock()
		return
	}
	g.logged[op] = now
	quiet := g.quiet[op]
	g.quiet[op] = 0
	g.mu.Unlock()
	g.log.Warn("kv redis: call failed; answering from this replica's own index", "op", op, "err", err, "unlogged_since_last", quiet)
}

// usable reports whether the breaker lets calls through (closed or
// half-open).
func (g *guard) usable() bool { return g.cb.State() != gobreaker.StateOpen }
