// Package server is the simulator's HTTP surface: the subset of `vllm serve`
// that warmpath touches — OpenAI completions and chat completions
// (streamed and not), /v1/models, /health, /tokenize, /detokenize,
// /metrics, /version and /reset_prefix_cache — with vLLM's response shapes
// and OpenAI-style JSON errors.
package server

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/warmpath/warmpath/libs/openai"
	"github.com/warmpath/warmpath/tools/vllmsim/engine"
	"github.com/warmpath/warmpath/tools/vllmsim/runtime"
	"github.com/warmpath/warmpath/tools/vllmsim/tokenize"
)

// Generator runs requests; *runtime.Runtime implements it.
type Generator interface {
	Submit(r *engine.Request) (<-chan runtime.Token, error)
	Abort(id string)
	ResetPrefixCache() bool
}

// Config configures the HTTP server.
type Config struct {
	// ServedModelNames are the names clients may use; the first is the
	// default and is reported by /v1/models.
	ServedModelNames []string
	// ModelRoot is the --model value, reported as each model's root.
	ModelRoot   string
	MaxModelLen int
	Tokenizer   *tokenize.Tokenizer
	Generator   Generator
	// Metrics serves /metrics.
	Metrics http.Handler
	// LMCacheL1 serves /debug/lmcache/l1, the L1's resident chunks (nil:
	// no L1); a simulator-only page, for tests checking what a router
	// believes against what the worker holds.
	LMCacheL1 http.Handler
	// GPUBlocks serves /debug/kv/gpu, the GPU prefix cache's registered
	// blocks (nil: not served); simulator-only, like LMCacheL1.
	GPUBlocks http.Handler
	// DefaultCompletionMaxTokens applies to /v1/completions without
	// max_tokens (16, as in OpenAI and vLLM).
	DefaultCompletionMaxTokens int
	// DefaultChatMaxTokens applies to chat requests without max_tokens.
	// vLLM generates up to max_model_len there, stopping at EOS; the
	// simulator has no EOS, so it uses this bound instead.
	DefaultChatMaxTokens int
	// EnablePromptTokensDetails adds prompt_tokens_details.cached_tokens
	// to usage (vLLM's --enable-prompt-tokens-details).
	EnablePromptTokensDetails bool
	// Tracer exports each finished request's llm_request span (vLLM's
	// --otlp-traces-endpoint); nil traces nothing.
	Tracer trace.Tracer
	// MaxBodyBytes bounds request bodies; larger ones get 413.
	MaxBodyBytes int64
	Version      string
	Log          *slog.Logger
}

// Server serves the simulator's HTTP API.
type Server struct {
	cfg Config
	mux *http.ServeMux
}

// New returns the HTTP handler of the simulator.
func New(cfg Config) (*Server, error) {
	switch {
	case len(cfg.ServedModelNames) == 0:
		return nil, errors.New("server: no served model name")
	case cfg.Tokenizer == nil || cfg.Generator == nil:
		return nil, errors.New("server: tokenizer and generator are required")
	case cfg.MaxModelLen < 1:
		return nil, errors.New("server: max model len must be positive")
	}
	if cfg.DefaultCompletionMaxTokens == 0 {
		cfg.DefaultCompletionMaxTokens = 16
	}
	if cfg.DefaultChatMaxTokens == 0 {
		cfg.DefaultChatMaxTokens = 256
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = 32 << 20
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, mux: http.NewServeMux()}
	s.mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	s.mux.HandleFunc("GET /version", s.version)
	s.mux.HandleFunc("GET /v1/models", s.models)
	s.mux.HandleFunc("POST /v1/completions", s.completions)
	s.mux.HandleFunc("POST /v1/chat/completions", s.chatCompletions)
	s.mux.HandleFunc("POST /tokenize", s.tokenize)
	s.mux.HandleFunc("POST /detokenize", s.detokenize)
	s.mux.HandleFunc("POST /reset_prefix_cache", s.resetPrefixCache)
	if cfg.Metrics != nil {
		s.mux.Handle("GET /metrics", cfg.Metrics)
	}
	if cfg.LMCacheL1 != nil {
		s.mux.Handle("GET /debug/lmcache/l1", cfg.LMCacheL1)
	}
	if cfg.GPUBlocks != nil {
		s.mux.Handle("GET /debug/kv/gpu", cfg.GPUBlocks)
	}
	return s, nil
}

// ServeHTTP routes a request; unknown paths and methods get JSON errors.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h, pattern := s.mux.Handler(r)
	if pattern == "" {
		// The mux would answer in plain text; answer like vLLM (JSON).
		rec := &statusProbe{}
		h.ServeHTTP(rec, r)
		if rec.status == http.StatusMethodNotAllowed {
			openai.WriteError(w, openai.Errorf(http.StatusMethodNotAllowed, "method %s not allowed for %s", r.Method, r.URL.Path))
			return
		}
		openai.WriteError(w, openai.Errorf(http.StatusNotFound, "no route for %s %s", r.Method, r.URL.Path))
		return
	}
	h.ServeHTTP(w, r)
}

// statusProbe records the status the mux's fallback handler would send.
type statusProbe struct {
	status int
	h      http.Header
}

func (p *statusProbe) Header() http.Header {
	if p.h == nil {
		p.h = http.Header{}
	}
	return p.h
}
func (p *statusProbe) Write(b []byte) (int, error) { return len(b), nil }
func (p *statusProbe) WriteHeader(code int)        { p.status = code }

func (s *Server) version(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"version": s.cfg.Version})
}

func (s *Server) models(w http.ResponseWriter, _ *http.Request) {
	list := openai.ModelList{Object: "list"}
	for _, name := range s.cfg.ServedModelNames {
		list.Data = append(list.Data, openai.Model{
			ID: name, Object: "model", Created: time.Now().Unix(), OwnedBy: "vllm",
			Root: s.cfg.ModelRoot, MaxModelLen: s.cfg.MaxModelLen,
		})
	}
	writeJSON(w, http.StatusOK, list)
}

func (s *Server) resetPrefixCache(w http.ResponseWriter, _ *http.Request) {
	if !s.cfg.Generator.ResetPrefixCache() {
		openai.WriteError(w, openai.Errorf(http.StatusServiceUnavailable, "prefix cache is in use by running requests; retry when idle"))
		return
	}
	w.WriteHeader(http.StatusOK)
}

// decode reads a JSON body into v with the size limit, mapping failures to
// OpenAI-style errors.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, v any) error {
	body := http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes)
	dec := json.NewDecoder(body)
	if err := dec.Decode(v); err != nil {
		var tooBig *http.MaxBytesError
		var typeErr *json.UnmarshalTypeError
		switch {
		case errors.As(err, &tooBig):
			return openai.Errorf(http.StatusRequestEntityTooLarge, "request body exceeds %d bytes", tooBig.Limit)
		case errors.Is(err, io.EOF):
			return openai.Errorf(http.StatusBadRequest, "request body is empty; expected a JSON object")
		case errors.As(err, &typeErr):
			// Field is a dotted path through embedded structs; the JSON
			// name is its last element.
			field := typeErr.Field[strings.LastIndexByte(typeErr.Field, '.')+1:]
			return openai.ParamErrorf(field, "invalid type for field %q: got JSON %s, want %s", typeErr.Field, typeErr.Value, typeErr.Type)
		default:
			return openai.Errorf(http.StatusBadRequest, "invalid JSON body: %v", err)
		}
	}
	if dec.More() {
		return openai.Errorf(http.StatusBadRequest, "invalid JSON body: trailing data after the JSON object")
	}
	return nil
}

// decodeOrReply decodes the body into v and, on failure, writes the error
// response and reports false.
func (s *Server) decodeOrReply(w http.ResponseWriter, r *http.Request, v any) bool {
	if err := s.decode(w, r, v); err != nil {
		openai.WriteError(w, err)
		return false
	}
	return true
}

// resolveModel returns the served name a request addresses.
func (s *Server) resolveModel(model string) (string, error) {
	if model == "" {
		return s.cfg.ServedModelNames[0], nil
	}
	if slices.Contains(s.cfg.ServedModelNames, model) {
		return model, nil
	}
	return "", &openai.APIError{Status: http.StatusNotFound, Type: openai.TypeNotFound, Param: "model",
		Message: fmt.Sprintf("The model `%s` does not exist.", model)}
}

// modelOrReply checks that model is served and, if not, writes the 404.
func (s *Server) modelOrReply(w http.ResponseWriter, model string) bool {
	if _, err := s.resolveModel(model); err != nil {
		openai.WriteError(w, err)
		return false
	}
	return true
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func newID(prefix string) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}
