// Package proxy is the router's HTTP front door (gin): it parses each
// OpenAI request just enough to route it, asks the configured strategy for
// a worker among the healthy ones serving the model, and proxies the
// response byte for byte — SSE flushed per event — with timeouts, bounded
// retries before the first byte, concurrency limits and OpenAI-style
// errors.
package proxy

import (
	"crypto/subtle"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/warmpath/warmpath/libs/openai"
	"github.com/warmpath/warmpath/services/router/internal/limiter"
	"github.com/warmpath/warmpath/services/router/internal/metrics"
	"github.com/warmpath/warmpath/services/router/internal/pool"
	"github.com/warmpath/warmpath/services/router/internal/strategy"
)

// Config holds the proxy settings fixed at start.
type Config struct {
	// MaxBodyBytes bounds request bodies (413 beyond).
	MaxBodyBytes int64
	// ConnectTimeout bounds dialing a worker.
	ConnectTimeout time.Duration
	// TTFBTimeout bounds the wait for the first byte of the response body
	// (prefill included): 504 when it passes.
	TTFBTimeout time.Duration
	// IdleTimeout bounds the gap between two body reads once streaming.
	IdleTimeout time.Duration
	// TotalTimeout bounds a whole request.
	TotalTimeout time.Duration
	// MaxRetries is how many other workers are tried after a connect
	// failure or a 5xx/429 answer, before any byte reached the client.
	MaxRetries int
	// MaxPerWorker bounds the router's concurrent requests at one worker;
	// 0 means unlimited.
	MaxPerWorker int
	// APIKey, when set, is required as "Authorization: Bearer <key>".
	APIKey string
	// Ejection configures passive outlier ejection.
	Ejection pool.Ejection
}

// Defaults fills zero fields.
func (c *Config) Defaults() {
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = 32 << 20
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

// Server is the router's HTTP handler.
type Server struct {
	cfg     Config
	pool    *pool.Pool
	limiter *limiter.Limiter
	metrics *metrics.Metrics
	tracer  trace.Tracer
	prop    propagation.TextMapPropagator
	log     *slog.Logger
	client  *http.Client
	routing atomic.Pointer[Routing]
	engine  *gin.Engine
	bufs    sync.Pool
}

// New builds the server. routing must be set before serving.
func New(cfg Config, p *pool.Pool, lim *limiter.Limiter, m *metrics.Metrics, tracer trace.Tracer, log *slog.Logger, routing *Routing) *Server {
	cfg.Defaults()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	transport := &http.Transport{
		Proxy:                 nil,
		DialContext:           (&net.Dialer{Timeout: cfg.ConnectTimeout, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       90 * time.Second,
		DisableCompression:    true,
		ExpectContinueTimeout: 0,
		// Large enough that headers and a typical prompt leave in one
		// write, and a response arrives in one read.
		WriteBufferSize: 64 << 10,
		ReadBufferSize:  64 << 10,
	}
	s := &Server{
		cfg: cfg, pool: p, limiter: lim, metrics: m, tracer: tracer, log: log,
		prop:   propagation.TraceContext{},
		client: &http.Client{Transport: transport, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
		bufs:   sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }},
	}
	s.routing.Store(routing)
	gin.SetMode(gin.ReleaseMode)
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
	api := e.Group("/", s.auth)
	api.POST("/v1/completions", s.generate)
	api.POST("/v1/chat/completions", s.generate)
	api.POST("/tokenize", s.generate)
	api.POST("/detokenize", s.generate)
	api.GET("/v1/models", s.models)
	e.GET("/debug/endpoints", s.debugEndpoints)
	e.GET("/debug/config", s.debugConfig)
	s.engine = e
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

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.engine.ServeHTTP(w, r) }

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
	if s.cfg.APIKey == "" {
		return
	}
	got := strings.TrimPrefix(c.GetHeader("Authorization"), "Bearer ")
	if subtle.ConstantTimeCompare([]byte(got), []byte(s.cfg.APIKey)) != 1 {
		s.metrics.Rejections.WithLabelValues(metrics.ReasonUnauthorized).Inc()
		writeError(c, openai.Errorf(http.StatusUnauthorized, "invalid or missing API key"))
		c.Abort()
	}
}

func (s *Server) ready(c *gin.Context) {
	for _, ep := range s.pool.All() {
		if ep.Available() {
			c.Status(http.StatusOK)
			return
		}
	}
	writeError(c, openai.Errorf(http.StatusServiceUnavailable, "no healthy worker"))
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
	Models       []string   `json:"models"`
	Running      int        `json:"running"`
	Waiting      int        `json:"waiting"`
	KVCacheUsage float64    `json:"kvCacheUsage"`
	BlockSize    int        `json:"blockSize"`
	NumGPUBlocks int        `json:"numGpuBlocks"`
	ScrapedAt    *time.Time `json:"scrapedAt,omitempty"`
	// CacheEntries and CacheCapacity are what the strategy believes the
	// worker caches, in prompt chunks (cache-aware strategies only).
	CacheEntries  *int `json:"cacheChunks,omitempty"`
	CacheCapacity *int `json:"cacheCapacityChunks,omitempty"`
}

func (s *Server) debugEndpoints(c *gin.Context) {
	var knowledge map[string]strategy.Knowledge
	if insp, ok := s.routing.Load().Strategy.(strategy.Inspector); ok {
		knowledge = insp.CacheKnowledge()
	}
	out := []endpointView{}
	for _, ep := range s.pool.All() {
		st := ep.Stats()
		v := endpointView{
			URL: ep.URL, Name: ep.Name, Healthy: ep.Healthy(), Ejections: ep.TotalEjections(),
			InFlight: ep.InFlight(), Models: ep.Models(), Running: st.Running, Waiting: st.Waiting,
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
		out = append(out, v)
	}
	c.JSON(http.StatusOK, gin.H{"endpoints": out})
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
