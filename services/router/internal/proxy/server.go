// Package proxy is the router's HTTP front door: it parses each
// OpenAI request just enough to route it, asks the configured strategy for
// a worker among the healthy ones serving the model, and proxies the
// response byte for byte — SSE flushed per event — with timeouts, bounded
// retries before the first byte, concurrency limits and OpenAI-style
// errors.
package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/warmpath/warmpath/libs/openai"
	"github.com/warmpath/warmpath/services/router/internal/limiter"
	"github.com/warmpath/warmpath/services/router/internal/metrics"
	"github.com/warmpath/warmpath/services/router/internal/pool"
	"github.com/warmpath/warmpath/services/router/internal/tokenizer"
	"github.com/warmpath/warmpath/services/router/internal/upstream"
	"github.com/warmpath/warmpath/services/router/strategy"
)

// Config holds the proxy settings fixed at start.
type Config struct {
	// Peers, when set, are the router replicas sharing this endpoint; a
	// cache-aware request another replica owns is relayed to it
	// (relay.go). PeerSelf is this replica's base URL among them.
	Peers    Peers
	PeerSelf string
	// MaxBodyBytes bounds request bodies (413 beyond).
	MaxBodyBytes int64
	// MaxConnections bounds the client connections served at once; the
	// server reads a whole body before routing, so with MaxBodyBytes it
	// bounds the memory bodies take. More connections get a 503.
	MaxConnections int
	// ConnectTimeout bounds dialing a worker.
	ConnectTimeout time.Duration
	// TTFBTimeout bounds the wait for the first byte of the response body
	// (prefill included): 504 when it passes.
	TTFBTimeout time.Duration
	// IdleTimeout bounds the gap between two body reads once streaming.
	IdleTimeout time.Duration
	// TotalTimeout bounds a whole request.
	TotalTimeout time.Duration
	// DisconnectCheckDelay is how long a request waits for its answer
	// before the router starts watching the client connection for a
	// disconnect (watch.go).
	DisconnectCheckDelay time.Duration
	// MaxRetries is how many other workers are tried after a failure that
	// RetryOn names, before any byte reached the client.
	MaxRetries int
	// RetryOn names the failures retried on another worker (retry.go);
	// nil means DefaultRetryOn, an empty set retries nothing.
	RetryOn RetryOn
	// PanicPercent: when fewer than this percentage of a model's workers
	// are available (healthy and not ejected), its requests go to all of
	// them, as Envoy's healthy_panic_threshold does; 0 never panics.
	PanicPercent int
	// WriteTimeout bounds writing a whole non-streamed response to the
	// client, so a client that stops reading cannot hold a connection;
	// streamed responses are bounded per write by IdleTimeout instead.
	WriteTimeout time.Duration
	// MaxPerWorker bounds the router's concurrent requests at one worker;
	// 0 means unlimited.
	MaxPerWorker int
	// APIKeys, when enabled, decides the keys clients must present as
	// "Authorization: Bearer <key>" (apikeys.Set); nil: none is needed.
	APIKeys Keys
	// Ejection configures passive outlier ejection.
	Ejection pool.Ejection
	// RoutedLogPerSecond is how many `routed` lines a second go out at
	// INFO, sampled by a token bucket; the rest are DEBUG. 0 logs every
	// one at DEBUG only.
	RoutedLogPerSecond float64
}

// Defaults fills zero fields.
func (c *Config) Defaults() {
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = 32 << 20
	}
	if c.MaxConnections <= 0 {
		c.MaxConnections = 4096
	}
	if c.ConnectTimeout <= 0 {
		c.ConnectTimeout = 3 * time.Second
	}
	if c.TTFBTimeout <= 0 {
		c.TTFBTimeout = 120 * time.Second
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = 60 * time.Second
	}
	if c.TotalTimeout <= 0 {
		c.TotalTimeout = 10 * time.Minute
	}
	if c.RetryOn == nil {
		c.RetryOn = DefaultRetryOn
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = 60 * time.Second
	}
	if c.DisconnectCheckDelay <= 0 {
		c.DisconnectCheckDelay = 20 * time.Millisecond
	}
}

// Routing is the hot-reloadable routing state.
type Routing struct {
	Strategy strategy.Strategy
	// SessionHeaders are read in order for the session key; the body's
	// `user` field comes last.
	SessionHeaders []string
	// Source is the configuration it was built from, shown by /debug/config.
	Source any
}

// Server is the router's HTTP front door.
//
// The proxied routes (completions, chat completions, tokenize,
// detokenize) are served on fasthttp with the in-goroutine upstream client:
// net/http's server and Transport spend, per request, several goroutine
// hand-offs that on a small machine cost more tail latency than everything
// the router does (docs/benchmarks.md). The control routes (health,
// models, debug, metrics) stay on gin, adapted, where their latency does
// not matter.
type Server struct {
	cfg     Config
	pool    *pool.Pool
	limiter *limiter.Limiter
	metrics *metrics.Metrics
	tracer  trace.Tracer
	prop    propagation.TextMapPropagator
	log     *slog.Logger
	client  *upstream.Client
	targets sync.Map // worker URL -> upstream.Target
	routing atomic.Pointer[Routing]
	engine  *gin.Engine
	control fasthttp.RequestHandler
	hs      *fasthttp.Server
	bufs    sync.Pool
	tok     Tokenizer
	kvState func() map[string]any
	// l2State is the shared L2's state (l2view) for /debug/endpoints.
	l2State func() any

	// draining is set by Drain, on SIGTERM.
	draining atomic.Bool
	connsMu  sync.Mutex // guards conns
	conns    map[net.Conn]struct{}

	// panicWarnAt is when panic routing was last logged (unix ns).
	panicWarnAt atomic.Int64
	// routed samples the `routed` lines logged at INFO.
	routed routedSampler
}

// Deps are what a Server is built on and shares with the rest of the
// router: the pool the prober and discovery keep, the limiter and metrics
// the app exports, and the routing state reloads replace.
type Deps struct {
	Pool    *pool.Pool
	Limiter *limiter.Limiter
	Metrics *metrics.Metrics
	// Tracer is nil for a no-op tracer.
	Tracer trace.Tracer
	// Log is nil to discard.
	Log *slog.Logger
	// Routing is the routing state served first (SetRouting replaces it).
	Routing *Routing
}

// New builds the server.
//
// It leaves gin's process-wide mode alone: the binary's main sets it once.
func New(cfg Config, d Deps) *Server {
	cfg.Defaults()
	log := d.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	tracer := d.Tracer
	if tracer == nil {
		tracer = noop.NewTracerProvider().Tracer("router")
	}
	s := &Server{
		cfg: cfg, pool: d.Pool, limiter: d.Limiter, metrics: d.Metrics, tracer: tracer, log: log,
		prop:   propagation.TraceContext{},
		client: upstream.New(upstream.Config{DialTimeout: cfg.ConnectTimeout}),
		bufs:   sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }},
		conns:  map[net.Conn]struct{}{},
		routed: newRoutedSampler(cfg.RoutedLogPerSecond),
	}
	s.routing.Store(d.Routing)
	e := gin.New()
	e.HandleMethodNotAllowed = true
	e.Use(s.recovery)
	e.NoRoute(func(c *gin.Context) {
		writeError(c, openai.Errorf(http.StatusNotFound, "no route for %s %s", c.Request.Method, c.Request.URL.Path))
	})
	e.NoMethod(func(c *gin.Context) {
		writeError(c, openai.Errorf(http.StatusMethodNotAllowed, "method %s not allowed for %s", c.Request.Method, c.Request.URL.Path))
	})
	e.GET("/health", func(c *gin.Context) { c.Status(http.StatusOK) })
	e.GET("/ready", s.ready)
	e.GET("/v1/models", s.auth, s.models)
	e.GET("/debug/endpoints", s.debugEndpoints)
	e.GET("/debug/config", s.debugConfig)
	s.engine = e
	s.control = fasthttpadaptor.NewFastHTTPHandler(e)
	s.hs = &fasthttp.Server{
		Handler:      s.serve,
		ErrorHandler: s.requestError,
		Name:         "warmpath-router",
		// A request (headers and body) must arrive within ReadTimeout; a
		// kept-alive connection may then idle for IdleTimeout. A response
		// must be written within WriteTimeout; a stream, which lasts as
		// long as generation does, moves that deadline on before each
		// write instead (stream.go).
		ReadTimeout:           60 * time.Second,
		IdleTimeout:           120 * time.Second,
		WriteTimeout:          cfg.WriteTimeout,
		MaxRequestBodySize:    int(min(cfg.MaxBodyBytes, math.MaxInt32)),
		Concurrency:           cfg.MaxConnections,
		ReadBufferSize:        16 << 10,
		NoDefaultServerHeader: true,
		NoDefaultContentType:  true,
		CloseOnShutdown:       true,
		// Shutdown closes idle keep-alive connections; the rest finish
		// their response first, up to the grace period (Shutdown).
		ConnState: s.trackConn,
		Logger:    fastLogger{log},
	}
	return s
}

// Handle registers an extra handler (e.g. /metrics).
func (s *Server) Handle(method, path string, h http.Handler) {
	s.engine.Handle(method, path, gin.WrapH(h))
}

// SetRouting swaps the routing state; requests in flight keep the one they
// started with.
func (s *Server) SetRouting(r *Routing) { s.routing.Store(r) }

// Routing returns the routing state in force.
func (s *Server) Routing() *Routing { return s.routing.Load() }

// Tokenizer turns a request into token ids for strategies that route on
// them (strategy.TokenUser).
type Tokenizer interface {
	Tokenize(ctx context.Context, workerURL string, req *strategy.Request) (tokenizer.Result, error)
}

// HeadTokenizer is a Tokenizer that can hand over a long prompt's head at
// once and encode the rest in the background (tokenizer.Client.Start),
// for a strategy.HeadRouter.
type HeadTokenizer interface {
	Start(req *strategy.Request) *tokenizer.Pending
}

// SetTokenizer sets the tokenizer; call before serving.
func (s *Server) SetTokenizer(t Tokenizer) { s.tok = t }

// SetKVState sets what /debug/endpoints shows of each worker's KV index
// and event stream (by worker URL); call before serving.
func (s *Server) SetKVState(f func() map[string]any) { s.kvState = f }

// SetL2State sets what /debug/endpoints shows under "l2": each cache
// server's event stream and the chunks the router knows it holds. Call it
// before serving.
func (s *Server) SetL2State(f func() any) { s.l2State = f }

// Forget drops what the server keeps for a worker that left: its pooled
// connections and parsed address.
func (s *Server) Forget(workerURL string) {
	if t, ok := s.targets.LoadAndDelete(workerURL); ok {
		s.client.CloseIdle(t.(upstream.Target).Addr)
	}
}

// Drain marks the server as leaving: /ready answers 503 from now on, and
// every response, including those of requests already in flight, closes
// its connection. Load balancers stop sending new connections to a pod
// only some time after it is told to stop (endpoints controller, then
// kube-proxy or an ingress); draining first keeps serving what still
// arrives meanwhile, and moves clients' kept-alive connections to other
// replicas, so that Shutdown, later, finds few idle connections to cut.
func (s *Server) Drain() { s.draining.Store(true) }

// Serve accepts connections on ln until Shutdown.
func (s *Server) Serve(ln net.Listener) error { return s.hs.Serve(ln) }

// Shutdown stops accepting and lets in-flight requests (streams included)
// finish for up to grace; past it, the remaining connections are closed.
func (s *Server) Shutdown(grace time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := s.hs.ShutdownWithContext(ctx); err != nil {
		s.log.Warn("shutdown grace period over; closing remaining connections", "err", err)
		s.connsMu.Lock()
		for c := range s.conns {
			_ = c.Close()
		}
		s.connsMu.Unlock()
	}
}

func (s *Server) trackConn(c net.Conn, st fasthttp.ConnState) {
	s.connsMu.Lock()
	defer s.connsMu.Unlock()
	switch st { //nolint:exhaustive // only the ends of a connection's life matter
	case fasthttp.StateNew:
		s.conns[c] = struct{}{}
	case fasthttp.StateClosed, fasthttp.StateHijacked:
		delete(s.conns, c)
	}
}

// fastLogger sends fasthttp's own messages to slog.
type fastLogger struct{ log *slog.Logger }

func (l fastLogger) Printf(format string, args ...any) { l.log.Warn(fmt.Sprintf(format, args...)) }

// serve dispatches a request: proxied routes natively, the rest to gin.
func (s *Server) serve(ctx *fasthttp.RequestCtx) {
	defer func() {
		// After the handler: a streamed body's headers are written once
		// it returns, and a request in flight when draining began closes
		// its connection too.
		if s.draining.Load() {
			ctx.SetConnectionClose()
		}
		if r := recover(); r != nil {
			s.log.Error("handler panicked", "panic", r, "path", string(ctx.Path()))
			ctx.Response.Reset()
			ctx.SetConnectionClose()
			writeFastError(ctx, openai.Errorf(http.StatusInternalServerError, "internal error"))
		}
	}()
	switch path := canonicalPath(string(ctx.Path()), ctx.PostBody()); path {
	case "/v1/completions", "/v1/chat/completions", "/tokenize", "/detokenize":
		if !ctx.IsPost() {
			writeFastError(ctx, openai.Errorf(http.StatusMethodNotAllowed, "method %s not allowed for %s", ctx.Method(), path))
			return
		}
		if !s.authorized(ctx.Request.Header.Peek("Authorization")) {
			s.metrics.Rejections.WithLabelValues(metrics.ReasonUnauthorized).Inc()
			writeFastError(ctx, openai.Errorf(http.StatusUnauthorized, "invalid or missing API key"))
			return
		}
		s.generate(ctx, path)
	default:
		s.control(ctx)
	}
}

// canonicalPath maps the invocation paths the managed offering's manifests
// name (invocationEndpoint) to the OpenAI paths vLLM serves, which the
// request is routed and forwarded as: /completions and /chat/completions
// without the /v1 prefix, and SageMaker's /invocations, a chat when its
// body has messages (as vLLM's own /invocations decides) and a completion
// otherwise. Other paths are returned as they are.
func canonicalPath(path string, body []byte) string {
	switch path {
	case "/completions":
		return "/v1/completions"
	case "/chat/completions":
		return "/v1/chat/completions"
	case "/invocations":
		if gjson.GetBytes(body, "messages").Exists() {
			return "/v1/chat/completions"
		}
		return "/v1/completions"
	}
	return path
}

// requestError answers requests fasthttp could not read.
func (s *Server) requestError(ctx *fasthttp.RequestCtx, err error) {
	ctx.SetConnectionClose()
	var e *openai.APIError
	var netErr net.Error
	switch {
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		s.metrics.Rejections.WithLabelValues(metrics.ReasonBodyTooLarge).Inc()
		s.metrics.Requests.WithLabelValues("", s.routing.Load().Strategy.Name(), metrics.Code(http.StatusRequestEntityTooLarge)).Inc()
		e = openai.Errorf(http.StatusRequestEntityTooLarge, "request body exceeds %d bytes", s.hs.MaxRequestBodySize)
	case errors.As(err, new(*fasthttp.ErrSmallBuffer)):
		s.metrics.Rejections.WithLabelValues(metrics.ReasonBadRequest).Inc()
		e = openai.Errorf(http.StatusRequestHeaderFieldsTooLarge, "request headers exceed %d bytes", s.hs.ReadBufferSize)
	case errors.As(err, &netErr) && netErr.Timeout():
		e = openai.Errorf(http.StatusRequestTimeout, "request not received within %s", s.hs.ReadTimeout)
	default:
		s.metrics.Rejections.WithLabelValues(metrics.ReasonBadRequest).Inc()
		e = openai.Errorf(http.StatusBadRequest, "malformed HTTP request: %v", err)
	}
	writeFastError(ctx, e)
}

// writeFastError writes e as an OpenAI-style JSON error.
func writeFastError(ctx *fasthttp.RequestCtx, e *openai.APIError) {
	ctx.Response.ResetBody()
	ctx.Response.Header.SetContentType("application/json")
	ctx.SetStatusCode(e.Status)
	_ = json.NewEncoder(ctx).Encode(e.Body())
}

func (s *Server) recovery(c *gin.Context) {
	defer func() {
		if r := recover(); r != nil {
			if r == http.ErrAbortHandler { //nolint:errorlint // sentinel panic value
				panic(r)
			}
			s.log.Error("handler panicked", "panic", r, "path", c.Request.URL.Path)
			if !c.Writer.Written() {
				writeError(c, openai.Errorf(http.StatusInternalServerError, "internal error"))
			}
			c.Abort()
		}
	}()
	c.Next()
}

func (s *Server) auth(c *gin.Context) {
	if !s.authorized([]byte(c.GetHeader("Authorization"))) {
		s.metrics.Rejections.WithLabelValues(metrics.ReasonUnauthorized).Inc()
		writeError(c, openai.Errorf(http.StatusUnauthorized, "invalid or missing API key"))
		c.Abort()
	}
}

// Keys decides which bearer tokens are API keys.
type Keys interface {
	Enabled() bool
	Valid(token []byte) bool
}

// authorized checks an Authorization value against the router's API keys.
func (s *Server) authorized(h []byte) bool {
	if s.cfg.APIKeys == nil || !s.cfg.APIKeys.Enabled() {
		return true
	}
	token, ok := bytes.CutPrefix(h, []byte("Bearer "))
	return ok && s.cfg.APIKeys.Valid(token)
}

func (s *Server) ready(c *gin.Context) {
	if s.draining.Load() {
		writeError(c, openai.Errorf(http.StatusServiceUnavailable, "shutting down"))
		return
	}
	// A worker passes its health check a moment before its models are
	// fetched; until some worker's are known, every request would be
	// refused, so traffic is better sent to a replica that knows them.
	for _, ep := range s.pool.All() {
		if ep.Available() && ep.Models() != nil {
			c.Status(http.StatusOK)
			return
		}
	}
	writeError(c, openai.Errorf(http.StatusServiceUnavailable, "no healthy worker with known models"))
}

func (s *Server) models(c *gin.Context) {
	seen := map[string]bool{}
	for _, ep := range s.pool.All() {
		if !ep.Available() {
			continue
		}
		for _, m := range ep.Models() {
			seen[m] = true
		}
	}
	list := openai.ModelList{Object: "list", Data: []openai.Model{}}
	now := time.Now().Unix()
	for m := range seen {
		list.Data = append(list.Data, openai.Model{ID: m, Object: "model", Created: now, OwnedBy: "warmpath"})
	}
	sort.Slice(list.Data, func(i, j int) bool { return list.Data[i].ID < list.Data[j].ID })
	c.JSON(http.StatusOK, list)
}

// endpointView is one worker in /debug/endpoints.
type endpointView struct {
	URL          string     `json:"url"`
	Name         string     `json:"name,omitempty"`
	Healthy      bool       `json:"healthy"`
	EjectedUntil *time.Time `json:"ejectedUntil,omitempty"`
	Ejections    uint64     `json:"ejections"`
	InFlight     int        `json:"inFlight"`
	// PeerInFlight is the other router replicas' requests at the worker,
	// as they last reported them (--peers); External is all the load the
	// strategy counts beside InFlight: PeerInFlight plus what the last
	// scrape saw beyond every replica's requests.
	PeerInFlight int `json:"peerInFlight"`
	External     int `json:"external"`
	// PendingPrefill is the prompt tokens sent and not yet answered.
	PendingPrefill int        `json:"pendingPrefillTokens"`
	Models         []string   `json:"models"`
	Running        int        `json:"running"`
	Waiting        int        `json:"waiting"`
	KVCacheUsage   float64    `json:"kvCacheUsage"`
	BlockSize      int        `json:"blockSize"`
	NumGPUBlocks   int        `json:"numGpuBlocks"`
	ScrapedAt      *time.Time `json:"scrapedAt,omitempty"`
	// CacheEntries and CacheCapacity are what the strategy believes the
	// worker caches, in prompt chunks (cache-aware strategies only).
	CacheEntries  *int `json:"cacheChunks,omitempty"`
	CacheCapacity *int `json:"cacheCapacityChunks,omitempty"`
	// KV is the kvaware index's blocks per tier and the worker's event
	// stream health, when events are subscribed to.
	KV any `json:"kv,omitempty"`
}

func (s *Server) debugEndpoints(c *gin.Context) {
	var knowledge map[string]strategy.Knowledge
	if insp, ok := s.routing.Load().Strategy.(strategy.Inspector); ok {
		knowledge = insp.CacheKnowledge()
	}
	var kv map[string]any
	if s.kvState != nil {
		kv = s.kvState()
	}
	out := []endpointView{}
	for _, ep := range s.pool.All() {
		st := ep.Stats()
		v := endpointView{
			URL: ep.URL, Name: ep.Name, Healthy: ep.Healthy(), Ejections: ep.TotalEjections(),
			InFlight: ep.InFlight(), PeerInFlight: ep.PeerInFlight(), External: ep.External(), PendingPrefill: ep.PendingPrefill(), Models: ep.Models(), Running: st.Running, Waiting: st.Waiting,
			KVCacheUsage: st.KVCacheUsage, BlockSize: st.BlockSize, NumGPUBlocks: st.NumGPUBlocks,
		}
		if v.Models == nil {
			v.Models = []string{}
		}
		if u := ep.EjectedUntil(); !u.IsZero() {
			v.EjectedUntil = &u
		}
		if !st.ScrapedAt.IsZero() {
			v.ScrapedAt = &st.ScrapedAt
		}
		if k, ok := knowledge[ep.URL]; ok {
			v.CacheEntries, v.CacheCapacity = &k.Chunks, &k.CapacityChunks
		}
		if st, ok := kv[ep.URL]; ok {
			v.KV = st
		}
		out = append(out, v)
	}
	resp := gin.H{"endpoints": out}
	if s.l2State != nil {
		resp["l2"] = s.l2State()
	}
	c.JSON(http.StatusOK, resp)
}

func (s *Server) debugConfig(c *gin.Context) {
	r := s.routing.Load()
	b, err := json.Marshal(gin.H{"strategy": r.Strategy.Name(), "sessionHeaders": r.SessionHeaders, "config": r.Source, "limits": s.limiter.Config()})
	if err != nil {
		writeError(c, openai.Errorf(http.StatusInternalServerError, "encode config: %v", err))
		return
	}
	c.Data(http.StatusOK, "application/json", b)
}

func writeError(c *gin.Context, e *openai.APIError) { openai.WriteError(c.Writer, e) }
