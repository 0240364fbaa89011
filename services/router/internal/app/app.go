// Package app assembles the router from its options: discovery, endpoint
// pool, prober, strategy (hot-reloaded from the config file), limiter,
// metrics, tracing and the HTTP server. cmd/router only parses flags.
package app

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/warmpath/warmpath/libs/openai"
	"github.com/warmpath/warmpath/libs/telemetry"
	"github.com/warmpath/warmpath/services/router/internal/config"
	"github.com/warmpath/warmpath/services/router/internal/discovery"
	"github.com/warmpath/warmpath/services/router/internal/kvredis"
	"github.com/warmpath/warmpath/services/router/internal/kvsub"
	"github.com/warmpath/warmpath/services/router/internal/l2learn"
	"github.com/warmpath/warmpath/services/router/internal/l2view"
	"github.com/warmpath/warmpath/services/router/internal/limiter"
	"github.com/warmpath/warmpath/services/router/internal/metrics"
	"github.com/warmpath/warmpath/services/router/internal/peerload"
	"github.com/warmpath/warmpath/services/router/internal/peers"
	"github.com/warmpath/warmpath/services/router/internal/pool"
	"github.com/warmpath/warmpath/services/router/internal/probe"
	"github.com/warmpath/warmpath/services/router/internal/proxy"
	"github.com/warmpath/warmpath/services/router/internal/tokenizer"
	"github.com/warmpath/warmpath/services/router/kvindex"
	"github.com/warmpath/warmpath/services/router/strategy"
)

// Options configure a router.
type Options struct {
	// Discovery produces the worker set.
	Discovery discovery.Source
	// Peers, when set, finds the other router replicas of this endpoint
	// (and this one, as PeerSelf, its base URL as Peers reports it); each
	// cache-aware request is then routed by the replica that owns its
	// prompt (package peer), the others relaying it there.
	Peers    discovery.Source
	PeerSelf string
	// PeerLoadInterval, with Peers, is how often this replica reads the
	// others' in-flight requests per worker (package peerload): 100 ms
	// when zero; negative: never, and the others' load is known only
	// from the workers' scraped metrics.
	PeerLoadInterval time.Duration
	// TLS, when set, serves clients over TLS only (libs/tlsconf: the
	// certificate reloaded as its files change).
	TLS *tls.Config
	// ConfigPath is the hot-reloaded routing configuration; empty uses
	// Routing and Limits as given.
	ConfigPath string
	Routing    strategy.Config
	Limits     limiter.Config
	Proxy      proxy.Config
	Probe      probe.Config
	// KVEvents says where workers publish KV-cache events; an empty
	// Endpoint leaves kvaware unavailable.
	KVEvents kvsub.Config
	// KVIndexMaxKeys bounds the kvaware index (block keys).
	KVIndexMaxKeys int
	// KVWorkerMaxBlocks bounds each worker's KV-event state (engine
	// blocks plus the keys of larger offloaded blocks);
	// kvindex.DefaultMaxWorkerBlocks when 0, and never above
	// KVIndexMaxKeys for the in-memory index.
	KVWorkerMaxBlocks int
	// KVIndexRedis, when set (redis://host:port/db, or a cluster's
	// redis-cluster://host:port,host:port), keeps the kvaware index in
	// Redis, shared by every router replica pointed at it.
	KVIndexRedis string
	// KVRedis tunes the Redis-shared index (timeouts, breaker, chunks);
	// its Local, Registerer and Log are filled in here.
	KVRedis kvredis.Config
	// L2 follows the shared L2's own event streams (warmpath's cache
	// servers), credited by kvaware to every worker; no Endpoints and no
	// L2Discovery: off.
	L2 l2view.Config
	// L2Discovery, when set, finds the cache servers instead of (or
	// besides, at start) L2.Endpoints: each target's URL is a server's data
	// API, its host also serving events on L2EventsPort.
	L2Discovery  discovery.Source
	L2EventsPort int
	// L2Learn, when its CapacityTokens is set and no L2 event endpoints
	// are, has kvaware learn the shared L2 from prefills (an L2 that
	// publishes nothing: Redis).
	L2Learn l2learn.Config
	// Tokenizer configures tokenization for kvaware.
	Tokenizer tokenizer.Config
	// Tracer for request spans; nil disables.
	Tracer trace.Tracer
	Log    *slog.Logger
	// Registry to export metrics on; nil creates one served at /metrics.
	Registry *prometheus.Registry
}

// kvStore is the kvaware index: in memory, or shared in Redis.
type kvStore interface {
	kvsub.Store
	strategy.BlockIndex
}

// confirming passes each committed batch to the store, then tells the
// router's kvaware predictions which blocks the worker confirmed stored,
// so they end (events replace predictions).
type confirming struct {
	kvStore
	confirm strategy.ConfirmingSink
	app     *App
}

// Commit implements kvindex.Sink.
func (c confirming) Commit(ch *kvindex.Change) error { return c.confirm.Commit(ch) }

// MaxWorkerBlocks implements kvindex.WorkerBounder, for the in-memory
// index and Redis alike.
func (c confirming) MaxWorkerBlocks() int {
	if b, ok := c.kvStore.(kvindex.WorkerBounder); ok {
		return b.MaxWorkerBlocks()
	}
	return c.app.opts.KVWorkerMaxBlocks
}

// App is a running router's parts.
type App struct {
	opts    Options
	pool    *pool.Pool
	prober  *probe.Prober
	limiter *limiter.Limiter
	metrics *metrics.Metrics
	server  *proxy.Server
	index   kvStore
	kvsubs  *kvsub.Manager
	// preds are kvaware's predictions, confirmed by the index's commits and
	// handed to every kvaware built, so a reload keeps them.
	preds   *strategy.Predictions
	l2      *l2view.View     // nil without L2 endpoints
	l2learn *l2learn.Learner // nil unless the L2 is learned from prefills
	peers   *peers.Set       // nil without Options.Peers
	// peerLoad shares in-flight counts with the peers; nil without peers
	// or with a negative PeerLoadInterval.
	peerLoad *peerload.Sharer

	mu      sync.Mutex // serialises reloads and peer updates
	current config.File
	// replicas is how many router replicas peer discovery last reported
	// (0 before any, or without peers); guarded by mu, so that a strategy
	// a reload builds gets the count a concurrent peer update set.
	replicas int
}

// labelCounter counts by a CounterVec's one label.
type labelCounter struct{ v *prometheus.CounterVec }

func (c labelCounter) Inc(label string) { c.v.WithLabelValues(label).Inc() }

// replicaSharer is a strategy whose model of the workers' caches is
// scaled to this replica's share of the prompt families: prefixaware, and
// session and kvaware for the requests their prefixaware fallback routes.
type replicaSharer interface{ SetReplicas(n int) }

// New builds a router. The prober's goroutines live until ctx ends.
func New(ctx context.Context, o Options) (*App, error) {
	if o.Discovery == nil {
		return nil, errors.New("app: no discovery source")
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Tracer == nil {
		o.Tracer = noop.NewTracerProvider().Tracer("router")
	}
	if o.Registry == nil {
		o.Registry = telemetry.NewRegistry()
	}
	a := &App{opts: o, pool: pool.New(), limiter: limiter.New(o.Limits), preds: strategy.NewPredictions()}
	a.metrics = metrics.New(o.Registry, a.pool, a.limiter.Stats)
	if o.KVIndexMaxKeys <= 0 {
		o.KVIndexMaxKeys = 1 << 22
	}
	if o.KVWorkerMaxBlocks <= 0 {
		o.KVWorkerMaxBlocks = kvindex.DefaultMaxWorkerBlocks
	}
	a.opts = o
	local := kvindex.NewBounded(kvindex.Limits{MaxKeys: o.KVIndexMaxKeys, MaxWorkerBlocks: o.KVWorkerMaxBlocks})
	a.index = local
	if o.KVIndexRedis != "" {
		rdb, err := kvredis.NewClient(o.KVIndexRedis)
		if err != nil {
			return nil, fmt.Errorf("app: --kv-index-redis: %w", err)
		}
		// The in-memory index is still fed: it answers while Redis is
		// unavailable and rewrites workers whose batches Redis lost.
		rc := o.KVRedis
		rc.Local, rc.Registerer, rc.Log = local, o.Registry, o.Log.With("component", "kvredis")
		a.index = kvredis.New(rdb, rc)
	}
	a.kvsubs = kvsub.New(o.KVEvents, confirming{kvStore: a.index, confirm: strategy.ConfirmingSink{Sink: a.index, Confirmer: a.preds}, app: a}, o.Log.With("component", "kvevents"))
	if a.kvsubs.Enabled() {
		o.Registry.MustRegister(kvsub.NewCollector(a.kvsubs, a.index))
	}
	switch {
	case o.L2Learn.CapacityTokens > 0 && (len(o.L2.Endpoints) > 0 || o.L2Discovery != nil):
		return nil, errors.New("app: the L2 is either learned from prefills or read from its event streams, not both")
	case o.L2Learn.CapacityTokens > 0:
		l, err := l2learn.New(o.L2Learn)
		if err != nil {
			return nil, fmt.Errorf("app: L2 learned from prefills: %w", err)
		}
		a.l2learn = l
		o.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "warmpath_router_l2_learned_chunks",
			Help: "Chunks the router takes the shared L2 to hold, learned from prefills (--l2-learn-capacity-tokens).",
		}, func() float64 { return float64(l.Chunks()) }))
	}
	if len(o.L2.Endpoints) > 0 || o.L2Discovery != nil {
		v, err := l2view.New(o.L2, o.Log.With("component", "l2view"))
		if err != nil {
			return nil, fmt.Errorf("app: L2 view: %w", err)
		}
		a.l2 = v
		o.Registry.MustRegister(l2view.NewCollector(v))
	}
	tok, err := tokenizer.New(o.Tokenizer)
	if err != nil {
		return nil, err
	}

	file := config.File{Config: o.Routing}
	if o.ConfigPath != "" {
		f, err := config.Load(o.ConfigPath)
		if err != nil {
			return nil, err
		}
		file = f
	}
	routing, err := a.build(file, nil)
	if err != nil {
		return nil, err
	}
	a.current = file
	if o.Peers != nil {
		a.peers = peers.New(o.PeerSelf)
		o.Proxy.Peers, o.Proxy.PeerSelf = a.peers, o.PeerSelf
	}
	a.server = proxy.New(o.Proxy, proxy.Deps{Pool: a.pool, Limiter: a.limiter, Metrics: a.metrics, Tracer: o.Tracer, Log: o.Log, Routing: routing})
	a.server.SetTokenizer(tok)
	a.server.SetKVState(a.kvState)
	if a.l2 != nil {
		a.server.SetL2State(a.l2State)
	}
	a.server.Handle(http.MethodGet, "/metrics", promhttp.HandlerFor(o.Registry, promhttp.HandlerOpts{Registry: o.Registry}))
	a.server.Handle(http.MethodGet, "/debug/kv/held", http.HandlerFunc(a.debugHeld))
	if a.peers != nil && o.PeerLoadInterval >= 0 {
		a.peerLoad = peerload.New(peerload.Config{
			Interval: o.PeerLoadInterval, Polls: labelCounter{a.metrics.PeerLoadPolls}, Log: o.Log.With("component", "peerload"),
		}, a.pool, a.peers)
		a.server.Handle(http.MethodGet, peerload.Path, a.peerLoad)
	}

	// Health transitions are logged by the prober and exported from the
	// pool at scrape time; the app observes restarts.
	a.prober = probe.New(ctx, o.Probe, nil, restartObserver{a}, o.Log.With("component", "probe"))
	a.pool.OnAdd = func(ep *pool.Endpoint) {
		// Models follow once the prober has asked (its "worker models").
		o.Log.Info("worker registered", workerAttrs(ep, a.pool)...)
		a.metrics.Ejections.WithLabelValues(ep.URL) // exported at 0 from the start
		a.prober.Start(ep)
		a.kvsubs.Start(ctx, ep.URL, ep)
	}
	a.pool.OnRemove = func(ep *pool.Endpoint) {
		o.Log.Info("worker deregistered", workerAttrs(ep, a.pool)...)
		a.prober.Stop(ep)
		a.metrics.Ejections.DeleteLabelValues(ep.URL)
		a.server.Forget(ep.URL)
		a.kvsubs.Stop(ep.URL)
		if f, ok := a.server.Routing().Strategy.(strategy.Forgetter); ok {
			f.Forget(ep.URL)
		}
	}
	return a, nil
}

// workerAttrs are a worker registered line's fields: its URL, the name
// discovery gave it (a pod, a DNS host; static workers have none) and the
// workers the pool holds now.
func workerAttrs(ep *pool.Endpoint, p *pool.Pool) []any {
	attrs := []any{"worker", ep.URL}
	if ep.Name != "" {
		attrs = append(attrs, "name", ep.Name)
	}
	return append(attrs, "workers", len(p.All()))
}

// build turns a configuration into routing state, keeping the previous
// strategy (and what it learnt) when its configuration did not change.
func (a *App) build(f config.File, prev *proxy.Routing) (*proxy.Routing, error) {
	if f.RequestLimits != nil {
		lc, err := f.RequestLimits.Limiter()
		if err != nil {
			return nil, err
		}
		a.limiter.SetConfig(lc)
	} else {
		a.limiter.SetConfig(a.opts.Limits)
	}
	if prev != nil && reflect.DeepEqual(a.current.Config, f.Config) {
		return &proxy.Routing{Strategy: prev.Strategy, SessionHeaders: prev.SessionHeaders, Source: f}, nil
	}
	var opts []strategy.Option
	if a.kvsubs.Enabled() {
		opts = append(opts, strategy.WithIndex(a.index), strategy.WithPrefillNotes(a.kvsubs), strategy.WithPredictions(a.preds))
	}
	if a.l2learn != nil {
		opts = append(opts, strategy.WithL2(a.l2learn))
	}
	if a.l2 != nil {
		opts = append(opts, strategy.WithL2(a.l2))
	}
	s, err := strategy.New(f.Config, opts...)
	if err != nil {
		return nil, err
	}
	if rs, ok := s.(replicaSharer); ok {
		rs.SetReplicas(a.replicas)
	}
	return &proxy.Routing{Strategy: s, SessionHeaders: f.Session.KeyHeaders(), Source: f}, nil
}

// setPeers takes the router replicas peer discovery reports: each
// request's owner follows the new set, and the strategy models this
// replica's share of each worker's cache, since relaying leaves it only
// the prompt families it owns.
func (a *App) setPeers(ts []discovery.Target) {
	a.peers.Update(ts)
	a.mu.Lock()
	a.replicas = len(ts)
	if rs, ok := a.server.Routing().Strategy.(replicaSharer); ok {
		rs.SetReplicas(a.replicas)
	}
	a.mu.Unlock()
	a.opts.Log.Info("router peers", "self", a.peers.Self(), "peers", len(ts))
}

// Reload rereads the configuration file; on error the running
// configuration stays in force. Requests in flight are unaffected.
func (a *App) Reload() error {
	if a.opts.ConfigPath == "" {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	f, err := config.Load(a.opts.ConfigPath)
	if err == nil {
		var r *proxy.Routing
		if r, err = a.build(f, a.server.Routing()); err == nil {
			a.server.SetRouting(r)
			a.current = f
		}
	}
	if err != nil {
		a.metrics.ConfigReloads.WithLabelValues("error").Inc()
		a.opts.Log.Error("config reload failed; keeping the running configuration", "path", a.opts.ConfigPath, "err", err)
		return err
	}
	a.metrics.ConfigReloads.WithLabelValues("success").Inc()
	a.opts.Log.Info("config reloaded", "path", a.opts.ConfigPath, "strategy", f.Name)
	return nil
}

// kvState is /debug/endpoints' view of each worker's index blocks and
// event stream.
func (a *App) kvState() map[string]any {
	if !a.kvsubs.Enabled() {
		return nil
	}
	st := a.index.Stats()
	out := map[string]any{}
	for w, h := range a.kvsubs.Health() {
		b := st.Blocks[w]
		out[w] = map[string]any{
			"blocks": map[string]int{"gpu": b[kvindex.GPU], "cpu": b[kvindex.CPU], "l2": b[kvindex.L2]},
			"events": h,
		}
	}
	return out
}

// debugHeld answers /debug/kv/held?worker=<url>&tier=<gpu|cpu|l2>: the
// engine block hashes (decimal, as the worker's events carry them) the
// router believes the worker holds in that tier, to compare with the
// worker's own cache.
func (a *App) debugHeld(w http.ResponseWriter, r *http.Request) {
	tier := -1
	for t := range kvindex.NumTiers {
		if t.String() == r.URL.Query().Get("tier") {
			tier = int(t)
		}
	}
	if tier < 0 {
		openai.WriteError(w, openai.ParamErrorf("tier", "tier must be gpu, cpu or l2"))
		return
	}
	held, ok := a.kvsubs.Held(r.URL.Query().Get("worker"), kvindex.Tier(tier))
	if !ok {
		openai.WriteError(w, openai.Errorf(http.StatusNotFound, "no KV event state for worker %q", r.URL.Query().Get("worker")))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"hashes": held})
}

// l2State is /debug/endpoints' "l2": the view's size and each cache
// server's stream.
func (a *App) l2State() any {
	return map[string]any{"view": a.l2.Stats(), "servers": a.l2.Health()}
}

// Strategy names the routing strategy in force.
func (a *App) Strategy() string { return a.server.Routing().Strategy.Name() }

// Pool exposes the endpoint pool (debugging, tests).
func (a *App) Pool() *pool.Pool { return a.pool }

// Run discovers workers, watches the configuration and serves on ln until
// ctx ends; then it stops accepting and lets in-flight requests (streams
// included) finish for up to grace.
func (a *App) Run(ctx context.Context, ln net.Listener, stop Stop) error {
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 4)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := a.opts.Discovery.Run(runCtx, a.pool.Update); err != nil && runCtx.Err() == nil {
			errc <- fmt.Errorf("discovery: %w", err)
		}
	}()
	if a.peers != nil {
		wg.Go(func() {
			err := a.opts.Peers.Run(runCtx, a.setPeers)
			if err != nil && runCtx.Err() == nil {
				errc <- fmt.Errorf("peer discovery: %w", err)
			}
		})
	}
	if a.peerLoad != nil {
		wg.Go(func() { a.peerLoad.Run(runCtx) })
	}
	if a.opts.ConfigPath != "" {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := config.Watch(runCtx, a.opts.ConfigPath, a.opts.Log, func() { _ = a.Reload() }); err != nil {
				a.opts.Log.Error("config watch stopped; reload with SIGHUP", "err", err)
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := a.kvsubs.Listen(runCtx); err != nil && runCtx.Err() == nil {
			errc <- fmt.Errorf("kv events: %w", err)
		}
	}()
	if a.l2 != nil {
		wg.Go(func() { a.l2.Run(runCtx) })
		if a.opts.L2Discovery != nil {
			wg.Go(func() { a.followCacheServers(runCtx) })
		}
	}
	if a.opts.TLS != nil {
		ln = tls.NewListener(ln, a.opts.TLS)
	}
	go func() { errc <- a.server.Serve(ln) }()

	var err error
	select {
	case <-ctx.Done():
		err = a.drain(stop.Drain, errc)
	case err = <-errc:
	}
	a.server.Shutdown(stop.Grace)
	cancel()
	wg.Wait()
	a.prober.Wait()
	a.kvsubs.Wait()
	return err
}

// Stop is how Run leaves once its context ends.
type Stop struct {
	// Drain is how long the router keeps accepting, its /ready failing
	// and each response closing its connection, before it stops
	// accepting: the time load balancers take to stop sending it new
	// connections (proxy.Server.Drain).
	Drain time.Duration
	// Grace is how long requests in flight (streams included) then get to
	// finish before their connections are closed.
	Grace time.Duration
}

// drain fails readiness and keeps serving for d, or until a component
// fails (errc).
func (a *App) drain(d time.Duration, errc <-chan error) error {
	a.server.Drain()
	a.opts.Log.Info("draining: /ready fails, connections close after their response, then accepting stops", "drain", d)
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case err := <-errc:
		return err
	}
}

// followCacheServers keeps the L2 view's cache servers those L2Discovery
// finds: each target's data API, and its host's event socket.
func (a *App) followCacheServers(ctx context.Context) {
	err := a.opts.L2Discovery.Run(ctx, func(ts []discovery.Target) {
		eps := make([]l2view.Endpoint, 0, len(ts))
		for _, t := range ts {
			u, err := url.Parse(t.URL)
			if err != nil {
				a.opts.Log.Warn("l2 discovery: a target that is not a URL", "target", t.URL, "err", err)
				continue
			}
			eps = append(eps, l2view.Endpoint{
				Events:      "tcp://" + net.JoinHostPort(u.Hostname(), strconv.Itoa(a.opts.L2EventsPort)),
				SnapshotURL: t.URL,
			})
		}
		a.l2.Update(eps)
	})
	if err != nil {
		a.opts.Log.Error("l2 discovery stopped; the cache servers known now stay followed", "err", err)
	}
}

// restartObserver drops what the router believes a worker caches when
// that may be gone: its KV index entries and the strategy's knowledge of
// it, once it fails its health probes (dead, or unusable until it answers
// again, when it counts as restarted anyway) and once it restarted.
type restartObserver struct{ a *App }

func (o restartObserver) HealthChanged(ep *pool.Endpoint, healthy bool) {
	if !healthy {
		o.forget(ep)
	}
}

func (o restartObserver) Restarted(ep *pool.Endpoint, reason string) {
	o.a.metrics.Restarts.WithLabelValues(reason).Inc()
	o.forget(ep)
}

func (o restartObserver) forget(ep *pool.Endpoint) {
	o.a.kvsubs.Restarted(ep.URL)
	if f, ok := o.a.server.Routing().Strategy.(strategy.Forgetter); ok {
		f.Forget(ep.URL)
	}
}
