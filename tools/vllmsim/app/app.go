// Package app assembles a simulated vLLM+LMCache worker from its options:
// tokenizer, timing model, engine core, LMCache L1, KV-event publisher,
// metrics, runtime and HTTP server. cmd/vllm-sim only parses flags into
// Options; tests build the same App in-process.
package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/warmpath/warmpath/libs/blockhash"
	"github.com/warmpath/warmpath/libs/httpserve"
	"github.com/warmpath/warmpath/libs/kvevents"
	"github.com/warmpath/warmpath/libs/kvevents/kvzmq"
	"github.com/warmpath/warmpath/libs/lmproto"
	"github.com/warmpath/warmpath/libs/telemetry"
	"github.com/warmpath/warmpath/libs/timing"
	"github.com/warmpath/warmpath/tools/vllmsim/engine"
	"github.com/warmpath/warmpath/tools/vllmsim/kvpublish"
	"github.com/warmpath/warmpath/tools/vllmsim/l2remote"
	"github.com/warmpath/warmpath/tools/vllmsim/lmcache"
	"github.com/warmpath/warmpath/tools/vllmsim/runtime"
	"github.com/warmpath/warmpath/tools/vllmsim/server"
	"github.com/warmpath/warmpath/tools/vllmsim/simmetrics"
	"github.com/warmpath/warmpath/tools/vllmsim/tokenize"
)

// Version is reported by /version.
const Version = "0.1.0-warmpath-sim"

// Options configure a simulated worker. Field names follow vLLM's flags.
type Options struct {
	Model                string
	ServedModelNames     []string
	BlockSize            int
	MaxNumSeqs           int
	MaxNumBatchedTokens  int
	MaxModelLen          int
	GPUMemoryUtilization float64
	// NumGPUBlocksOverride replaces the block count derived from the
	// preset's GPU memory (vLLM's --num-gpu-blocks-override).
	NumGPUBlocksOverride  int
	EnablePrefixCaching   bool
	PrefixCachingHashAlgo string
	// HashSeed plays PYTHONHASHSEED: it fixes NONE_HASH; empty is random.
	HashSeed string
	// KVEventsConfig is vLLM's --kv-events-config JSON; empty disables.
	KVEventsConfig   string
	KVEventsEncoding kvevents.Encoding
	// KVEventsIntHashes mirrors VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES (default on).
	KVEventsIntHashes bool
	// KVTransferConfig is vLLM's --kv-transfer-config JSON; naming
	// LMCacheConnectorV1 enables the LMCache emulation.
	KVTransferConfig string
	LMCache          LMCacheOptions

	Tokenizer                 string
	ChatTemplate              string
	Preset                    string
	TimeScale                 float64
	EnablePromptTokensDetails bool
	DefaultChatMaxTokens      int
	MaxBodyBytes              int64
	// MaxWaitingRequests bounds the engine's queue; more get 503.
	MaxWaitingRequests int
	// WorkerID labels LMCache metrics (LMCache's lmcache_instance_id).
	WorkerID string
	// OTLPTracesEndpoint is vLLM's --otlp-traces-endpoint: the collector
	// each finished request's llm_request span goes to; empty traces
	// nothing.
	OTLPTracesEndpoint string
	// OTLPTracesProtocol is the exporter's transport (TracesProtocol);
	// empty is vLLM's default, gRPC.
	OTLPTracesProtocol telemetry.Protocol
	// TraceExporter replaces the OTLP exporter (in-process tests).
	TraceExporter sdktrace.SpanExporter
	Log           *slog.Logger
}

// tracingFlushTimeout bounds the wait for the last spans at shutdown, so
// an unreachable collector cannot hold the process.
const tracingFlushTimeout = 5 * time.Second

// TracesProtocol is the trace exporter's transport as vLLM picks it:
// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, grpc when unset, and any value but
// grpc or http/protobuf an error (vLLM refuses it at start too). lookup
// is os.LookupEnv outside tests.
func TracesProtocol(lookup func(string) (string, bool)) (telemetry.Protocol, error) {
	p, err := telemetry.TracesProtocolFromEnv(lookup, telemetry.ProtocolGRPC)
	if err != nil {
		return "", fmt.Errorf("app: %w", err)
	}
	return p, nil
}

// LMCacheOptions are the LMCache settings the emulation honours (from
// LMCACHE_* environment variables, as LMCache reads them).
type LMCacheOptions struct {
	ChunkSize int
	// LocalCPU enables the L1 tier (LMCACHE_LOCAL_CPU).
	LocalCPU bool
	// MaxLocalCPUSizeGB is the L1 capacity in GB (LMCACHE_MAX_LOCAL_CPU_SIZE).
	MaxLocalCPUSizeGB float64
	// RemoteURL is the shared L2 (LMCACHE_REMOTE_URL): lm://host:port or
	// redis://host:port; empty means none.
	RemoteURL string
	// RemoteScale divides the bytes of each chunk stored in L2, so a
	// laptop can hold a simulated fleet's KV (1 stores full-size chunks).
	RemoteScale int64
	// RemoteTimeout bounds each L2 call.
	RemoteTimeout time.Duration
	// Events is what the L1 publishes to the KV-event stream: store-only
	// (current LMCache, the default), none or full (lmcache.EventMode).
	Events lmcache.EventMode
}

// DefaultOptions returns vLLM's defaults with the simulator's own choices.
func DefaultOptions() Options {
	return Options{
		Model:                     "meta-llama/Llama-3.1-8B-Instruct",
		BlockSize:                 16,
		MaxNumSeqs:                256,
		MaxNumBatchedTokens:       8192,
		MaxModelLen:               32768,
		GPUMemoryUtilization:      0.9,
		EnablePrefixCaching:       true,
		PrefixCachingHashAlgo:     "sha256_cbor",
		KVEventsEncoding:          kvevents.MapEncoding,
		KVEventsIntHashes:         true,
		LMCache:                   LMCacheOptions{ChunkSize: 256, LocalCPU: true, MaxLocalCPUSizeGB: 5, RemoteScale: 64, RemoteTimeout: 2 * time.Second},
		Tokenizer:                 "cl100k_base",
		ChatTemplate:              "llama3",
		Preset:                    timing.DefaultPreset,
		TimeScale:                 1,
		EnablePromptTokensDetails: true,
		DefaultChatMaxTokens:      256,
		MaxBodyBytes:              32 << 20,
		MaxWaitingRequests:        10000,
	}
}

// App is one simulated worker.
type App struct {
	opts      Options
	handler   http.Handler
	rt        *runtime.Runtime
	pub       *kvzmq.Publisher
	l1        *lmcache.L1
	l2        *lmcache.Tiered
	remote    l2remote.Client
	engineCfg engine.Config
	model     timing.Model
	// stopTracing flushes and closes the span exporter (nil: no tracing).
	stopTracing func(context.Context) error
}

// kvTransferConfig is the part of --kv-transfer-config the simulator reads.
type kvTransferConfig struct {
	KVConnector string `json:"kv_connector"`
	KVRole      string `json:"kv_role"`
}

// New builds a worker; call Serve to run it.
func New(ctx context.Context, o Options) (*App, error) {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if len(o.ServedModelNames) == 0 {
		o.ServedModelNames = []string{o.Model}
	}
	if o.WorkerID == "" {
		o.WorkerID = "0"
	}
	if filepath.IsAbs(o.Model) {
		files, bytes, err := modelDir(o.Model)
		if err != nil {
			return nil, err
		}
		o.Log.Info("model directory", "path", o.Model, "files", files, "bytes", bytes)
	}
	switch o.PrefixCachingHashAlgo {
	case "sha256", "sha256_cbor":
		// vLLM's "sha256" pickles, which only Python can reproduce; both
		// are served by the canonical-CBOR variant.
	default:
		return nil, fmt.Errorf("app: --prefix-caching-hash-algo %q not supported (sha256, sha256_cbor)", o.PrefixCachingHashAlgo)
	}
	preset, err := timing.Lookup(o.Preset)
	if err != nil {
		return nil, err
	}
	model, err := timing.NewModel(preset)
	if err != nil {
		return nil, err
	}
	tmpl, err := tokenize.ParseTemplate(o.ChatTemplate)
	if err != nil {
		return nil, err
	}
	tok, err := tokenize.New(o.Tokenizer, tmpl)
	if err != nil {
		return nil, err
	}
	hasher, err := blockhash.New(o.HashSeed)
	if err != nil {
		return nil, err
	}
	numBlocks := o.NumGPUBlocksOverride
	if numBlocks == 0 {
		numBlocks = model.NumGPUBlocks(o.BlockSize, o.GPUMemoryUtilization)
	}
	a := &App{opts: o, model: model}

	if o.KVTransferConfig != "" {
		var kt kvTransferConfig
		dec := json.NewDecoder(strings.NewReader(o.KVTransferConfig))
		if err := dec.Decode(&kt); err != nil {
			return nil, fmt.Errorf("app: --kv-transfer-config: %w", err)
		}
		if kt.KVConnector != "LMCacheConnectorV1" {
			return nil, fmt.Errorf("app: --kv-transfer-config: connector %q not simulated (only LMCacheConnectorV1)", kt.KVConnector)
		}
		if o.LMCache.LocalCPU || o.LMCache.RemoteURL != "" {
			maxBytes := int64(o.LMCache.MaxLocalCPUSizeGB * 1e9)
			if !o.LMCache.LocalCPU {
				maxBytes = 0 // L2 only: an L1 that holds nothing keeps the counters
			}
			a.l1, err = lmcache.New(lmcache.Config{
				ChunkSize:     o.LMCache.ChunkSize,
				MaxBytes:      maxBytes,
				BytesPerToken: int64(preset.KVBytesPerToken() / preset.TensorParallel),
				Events:        o.LMCache.Events,
			}, hasher)
			if err != nil {
				return nil, err
			}
		}
		if o.LMCache.RemoteURL != "" {
			if err := a.openRemote(ctx, preset.TensorParallel); err != nil {
				return nil, err
			}
		}
	}

	a.engineCfg = engine.Config{
		BlockSize: o.BlockSize, NumGPUBlocks: numBlocks, MaxNumSeqs: o.MaxNumSeqs,
		MaxNumBatchedTokens: o.MaxNumBatchedTokens, MaxModelLen: o.MaxModelLen,
		EnablePrefixCaching: o.EnablePrefixCaching, Timing: model, Hasher: hasher,
	}
	switch {
	case a.l2 != nil:
		a.engineCfg.Connector = a.l2
	case a.l1 != nil:
		a.engineCfg.Connector = a.l1
	}
	eng, err := engine.New(a.engineCfg)
	if err != nil {
		return nil, err
	}

	rtCfg := runtime.Config{Engine: eng, TimeScale: o.TimeScale, MaxWaiting: o.MaxWaitingRequests, Log: o.Log}
	if a.l1 != nil {
		rtCfg.L1Events = a.l1
	}
	if o.KVEventsConfig != "" {
		kc, err := kvzmq.ParseConfig(o.KVEventsConfig)
		if err != nil {
			return nil, fmt.Errorf("app: --kv-events-config: %w", err)
		}
		if kc.Enabled() {
			a.pub, err = kvzmq.NewPublisher(ctx, kc, o.KVEventsEncoding, o.Log.With("component", "kv-events"))
			if err != nil {
				return nil, fmt.Errorf("app: kv events publisher: %w", err)
			}
			rtCfg.Events = &kvpublish.Sink{Pub: a.pub, IntHashes: o.KVEventsIntHashes}
		}
	}
	a.rt, err = runtime.New(rtCfg)
	if err != nil {
		return nil, err
	}

	reg := telemetry.NewRegistry()
	var pubStats simmetrics.PublisherStats
	if a.pub != nil {
		pubStats = func() (uint64, uint64, uint64) {
			s := a.pub.Stats()
			return a.pub.Sequenced(), s.Published, s.Dropped
		}
	}
	sm := simmetrics.New(reg, simmetrics.Info{
		ModelName: o.ServedModelNames[0], WorkerID: o.WorkerID,
		GPUMemoryUtilization: o.GPUMemoryUtilization, Timing: model,
	}, a.rt, a.l1, a.l2, pubStats)
	a.rt.SetObserver(sm)
	if a.l2 != nil {
		a.l2.SetObserver(sm)
	}

	var tracer trace.Tracer
	if o.OTLPTracesEndpoint != "" || o.TraceExporter != nil {
		if tracer, err = a.startTracing(ctx); err != nil {
			return nil, err
		}
	}
	srv, err := server.New(server.Config{
		ServedModelNames: o.ServedModelNames, ModelRoot: o.Model, MaxModelLen: o.MaxModelLen,
		Tokenizer: tok, Generator: a.rt,
		Metrics:                   promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}),
		LMCacheL1:                 a.l1Handler(),
		GPUBlocks:                 a.gpuHandler(),
		DefaultChatMaxTokens:      o.DefaultChatMaxTokens,
		EnablePromptTokensDetails: o.EnablePromptTokensDetails,
		MaxBodyBytes:              o.MaxBodyBytes, Version: Version, Log: o.Log,
		Tracer: tracer,
	})
	if err != nil {
		return nil, err
	}
	a.handler = srv
	o.Log.Info("engine ready", "model", o.Model, "timing", model.String(), "num_gpu_blocks", numBlocks,
		"block_size", o.BlockSize, "prefix_caching", o.EnablePrefixCaching, "lmcache_l1", a.l1 != nil, "lmcache_remote", o.LMCache.RemoteURL,
		"kv_events", a.pub != nil, "time_scale", o.TimeScale, "otlp_traces_endpoint", o.OTLPTracesEndpoint)
	return a, nil
}

// startTracing builds the tracer of the llm_request spans. The service is
// vllm unless OTEL_SERVICE_NAME names another; the provider stays out of
// the otel globals, as several workers may share a test process.
func (a *App) startTracing(ctx context.Context) (trace.Tracer, error) {
	proto := a.opts.OTLPTracesProtocol
	if proto == "" {
		proto = telemetry.ProtocolGRPC
	}
	tp, stop, err := telemetry.NewTracerProvider(ctx, telemetry.TracingConfig{
		ServiceName: "vllm", OTLPEndpoint: a.opts.OTLPTracesEndpoint, Protocol: proto, Exporter: a.opts.TraceExporter,
	})
	if err != nil {
		return nil, fmt.Errorf("app: --otlp-traces-endpoint: %w", err)
	}
	a.stopTracing = stop
	// vLLM's instrumentation scope.
	return tp.Tracer("vllm.llm_engine"), nil
}

// l1Handler serves the L1's resident chunks as the KV events name them
// (the wire form of each hash, as an unsigned integer), its capacity and
// its event mode; nil without an L1.
func (a *App) l1Handler() http.Handler {
	if a.l1 == nil {
		return nil
	}
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hs := a.l1.Hashes()
		chunks := make([]uint64, len(hs))
		for i, h := range hs {
			chunks[i] = kvpublish.WireHash(h, a.opts.KVEventsIntHashes).Uint64()
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"chunks": chunks, "capacity_chunks": a.l1.CapacityChunks(), "chunk_tokens": a.l1.ChunkTokens(), "events": a.opts.LMCache.Events,
		})
	})
}

// gpuHandler serves the GPU prefix cache's registered blocks as the KV
// events name them (the wire form of each hash, as an unsigned integer):
// what a router that applied every event published so far credits the
// worker with.
func (a *App) gpuHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		var blocks []uint64
		var total int
		a.rt.With(func(e *engine.Engine, _ float64) {
			total = e.Pool().NumBlocks()
			for h := range e.Pool().CachedHashes() {
				blocks = append(blocks, kvpublish.WireHash(h, a.opts.KVEventsIntHashes).Uint64())
			}
		})
		slices.Sort(blocks)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"blocks": blocks, "num_gpu_blocks": total})
	})
}

// openRemote connects the LMCache L2 named by --lmcache-remote-url behind
// the L1. Keys follow LMCache's layout, model@world_size@worker_id@hash@dtype,
// so every simulated worker of one model shares them.
func (a *App) openRemote(ctx context.Context, worldSize int) error {
	o := a.opts.LMCache
	if o.RemoteScale < 1 {
		return fmt.Errorf("app: lmcache remote scale %d: want ≥ 1", o.RemoteScale)
	}
	valueBytes := a.l1.ChunkBytes() / o.RemoteScale
	prefix := fmt.Sprintf("%s@%d@0@", a.opts.Model, worldSize)
	const suffix = "@bfloat16"
	probe := prefix + strings.Repeat("0", 2*blockhash.Size) + suffix
	if err := lmproto.ValidKey(probe); err != nil {
		return fmt.Errorf("app: lmcache remote keys for model %q: %w", a.opts.Model, err)
	}
	cl, err := l2remote.Open(o.RemoteURL, o.RemoteTimeout, int(valueBytes)+4096)
	if err != nil {
		return fmt.Errorf("app: --lmcache-remote-url: %w", err)
	}
	a.l2, err = lmcache.NewTiered(ctx, a.l1, lmcache.RemoteConfig{
		Remote: cl, KeyPrefix: prefix, KeySuffix: suffix, Scale: o.RemoteScale,
		NetworkSeconds: a.model.NetworkSeconds,
		Timeout:        o.RemoteTimeout, Log: a.opts.Log.With("component", "lmcache-remote"),
	})
	if err != nil {
		_ = cl.Close()
		return err
	}
	a.remote = cl
	return nil
}

// Handler returns the HTTP API.
func (a *App) Handler() http.Handler { return a.handler }

// EngineConfig returns the engine's effective configuration.
func (a *App) EngineConfig() engine.Config { return a.engineCfg }

// KVEventsAddr returns the bound KV-event PUB address (nil if not binding).
func (a *App) KVEventsAddr() net.Addr {
	if a.pub == nil {
		return nil
	}
	return a.pub.Addr()
}

// KVEventsReplayAddr returns the bound replay address (nil if none).
func (a *App) KVEventsReplayAddr() net.Addr {
	if a.pub == nil {
		return nil
	}
	return a.pub.ReplayAddr()
}

// Serve runs the engine loop and the HTTP server on ln until ctx ends, then
// shuts down gracefully: it stops accepting, lets in-flight requests finish
// for up to grace, and closes the publisher.
func (a *App) Serve(ctx context.Context, ln net.Listener, grace time.Duration) error {
	loopCtx, stopLoop := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	loopErr := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		loopErr <- a.rt.Run(loopCtx)
	}()
	hs := httpserve.New(a.handler, a.opts.Log)
	// Bodies are bounded (MaxBodyBytes); a client that trickles one is cut.
	hs.ReadTimeout = 60 * time.Second
	serveErr := make(chan error, 1)
	go func() { serveErr <- hs.Serve(ln) }()

	var err error
	select {
	case <-ctx.Done():
	case err = <-serveErr:
	case err = <-loopErr:
		err = fmt.Errorf("engine loop stopped: %w", err)
	}
	httpserve.Shutdown(ctx, hs, grace, a.opts.Log)
	stopLoop()
	wg.Wait()
	if a.pub != nil {
		if cerr := a.pub.Close(); cerr != nil {
			a.opts.Log.Warn("close kv events publisher", "err", cerr)
		}
	}
	if a.l2 != nil {
		a.l2.Close()
		if cerr := a.remote.Close(); cerr != nil {
			a.opts.Log.Warn("close lmcache remote", "err", cerr)
		}
	}
	if a.stopTracing != nil {
		// Requests finished during the grace period; send their spans.
		flushCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), tracingFlushTimeout)
		if terr := a.stopTracing(flushCtx); terr != nil {
			a.opts.Log.Warn("flush traces", "err", terr)
		}
		cancel()
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// modelDir checks a local model directory as vLLM does before loading
// weights: an absolute --model is a path, and its config.json must be there
// (vLLM falls back to the hub only for names, and fails on a path it cannot
// read). It returns the files and bytes the directory holds, for the log
// that shows a model fetch landed.
func modelDir(dir string) (files int, bytes int64, err error) {
	if _, err := os.Stat(filepath.Join(dir, "config.json")); err != nil {
		return 0, 0, fmt.Errorf("app: --model %s is a path, and vLLM could not load a model from it: %w", dir, err)
	}
	err = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		files, bytes = files+1, bytes+info.Size()
		return nil
	})
	if err != nil {
		return 0, 0, fmt.Errorf("app: --model %s: %w", dir, err)
	}
	return files, bytes, nil
}
