// Command vllm-sim is a GPU-less stand-in for `vllm serve` with LMCache:
// the same HTTP API, metrics and KV-cache events, driven by a modelled
// engine (see docs/simulator.md). Flags carry vLLM's names; every flag can
// also be set through the environment as VLLM_SIM_<FLAG> (dashes become
// underscores), and the environment variables vLLM and LMCache read
// (PYTHONHASHSEED, VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES, LMCACHE_*) work too.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/warmpath/warmpath/libs/flagenv"
	"github.com/warmpath/warmpath/libs/kvevents"
	"github.com/warmpath/warmpath/libs/telemetry"
	"github.com/warmpath/warmpath/libs/timing"
	"github.com/warmpath/warmpath/tools/vllmsim/app"
	"github.com/warmpath/warmpath/tools/vllmsim/lmcache"
	"github.com/warmpath/warmpath/tools/vllmsim/tokenize"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "vllm-sim:", err)
		os.Exit(1)
	}
}

func run() error {
	o := app.DefaultOptions()
	fs := flag.NewFlagSet("vllm-sim", flag.ContinueOnError)
	host := fs.String("host", "0.0.0.0", "address to listen on")
	port := fs.Int("port", 8000, "port to listen on")
	fs.StringVar(&o.Model, "model", o.Model, "model name or path (reported as the model root)")
	served := fs.String("served-model-name", "", "comma-separated names the API accepts (default: --model)")
	fs.IntVar(&o.BlockSize, "block-size", o.BlockSize, "tokens per KV block")
	fs.IntVar(&o.MaxNumSeqs, "max-num-seqs", o.MaxNumSeqs, "maximum running sequences per step")
	fs.IntVar(&o.MaxNumBatchedTokens, "max-num-batched-tokens", o.MaxNumBatchedTokens, "maximum tokens per step (chunked prefill budget)")
	fs.IntVar(&o.MaxModelLen, "max-model-len", o.MaxModelLen, "maximum prompt + output tokens")
	fs.Float64Var(&o.GPUMemoryUtilization, "gpu-memory-utilization", o.GPUMemoryUtilization, "fraction of GPU memory for weights, activations and KV")
	fs.IntVar(&o.NumGPUBlocksOverride, "num-gpu-blocks-override", 0, "number of GPU KV blocks (default: derived from the preset's GPU memory)")
	fs.BoolVar(&o.EnablePrefixCaching, "enable-prefix-caching", o.EnablePrefixCaching, "enable automatic prefix caching")
	noPrefix := fs.Bool("no-enable-prefix-caching", false, "disable automatic prefix caching")
	fs.StringVar(&o.PrefixCachingHashAlgo, "prefix-caching-hash-algo", o.PrefixCachingHashAlgo, "block hash: sha256_cbor (sha256 is accepted as an alias)")
	fs.StringVar(&o.KVEventsConfig, "kv-events-config", "", `KV-cache events JSON, e.g. '{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:5557","replay_endpoint":"tcp://*:5558","topic":"kv@pod@model"}'`)
	encoding := fs.String("kv-events-encoding", "map", "KV event encoding: map (vLLM ≥ 0.26) or positional (older)")
	fs.StringVar(&o.KVTransferConfig, "kv-transfer-config", "", `KV connector JSON; '{"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both"}' enables the LMCache emulation`)
	fs.StringVar(&o.Tokenizer, "tokenizer", o.Tokenizer, "BPE vocabulary: "+strings.Join(tokenize.Encodings, ", "))
	fs.StringVar(&o.ChatTemplate, "chat-template", o.ChatTemplate, "chat template: llama3 or chatml")
	fs.StringVar(&o.Preset, "preset", o.Preset, "timing preset: "+strings.Join(timing.Names(), ", "))
	fs.Float64Var(&o.TimeScale, "time-scale", o.TimeScale, "run this many times faster than the modelled GPU (latencies reported stay modelled)")
	fs.BoolVar(&o.EnablePromptTokensDetails, "enable-prompt-tokens-details", o.EnablePromptTokensDetails, "report usage.prompt_tokens_details.cached_tokens")
	fs.IntVar(&o.DefaultChatMaxTokens, "default-chat-max-tokens", o.DefaultChatMaxTokens, "output tokens for chat requests without max_tokens (the simulator has no EOS)")
	fs.Int64Var(&o.MaxBodyBytes, "max-request-body-bytes", o.MaxBodyBytes, "largest accepted request body")
	fs.IntVar(&o.MaxWaitingRequests, "max-waiting-requests", o.MaxWaitingRequests, "queued requests beyond which new ones get 503 (bounds memory)")
	fs.StringVar(&o.LMCache.RemoteURL, "lmcache-remote-url", "", "shared LMCache L2: lm://host:port (warmpath cache server) or redis://host:port (default: $LMCACHE_REMOTE_URL; needs the LMCache connector in --kv-transfer-config)")
	fs.Int64Var(&o.LMCache.RemoteScale, "lmcache-remote-scale", o.LMCache.RemoteScale, "store each L2 chunk's KV divided by this (1: full size); fetch time is still charged for the full size")
	fs.DurationVar(&o.LMCache.RemoteTimeout, "lmcache-remote-timeout", o.LMCache.RemoteTimeout, "bound on each L2 call; a failed call makes the L2 a miss for a second")
	lmEvents := fs.String("lmcache-kv-events", string(lmcache.EventsStoreOnly), "what the LMCache L1 publishes as KV events: store-only (current LMCache: stores, never evictions), none (GPU events only) or full (stores and evictions; a future LMCache)")
	listPresets := fs.Bool("list-presets", false, "print each timing preset's derived figures and exit")
	fs.StringVar(&o.WorkerID, "worker-id", "0", "LMCache worker/instance id label")
	fs.StringVar(&o.OTLPTracesEndpoint, "otlp-traces-endpoint", "", "OTLP collector URL for one llm_request span per finished request, as vLLM exports (gRPC unless OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf, then the URL is POSTed to as given, e.g. http://collector:4318/v1/traces)")
	grace := fs.Duration("shutdown-grace", 30*time.Second, "time in-flight requests get to finish on SIGTERM")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	logFormat := fs.String("log-format", "json", "json or text")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: vllm-sim [flags]\n\nA GPU-less vLLM+LMCache worker simulator. Flags:\n")
		fs.PrintDefaults()
		fmt.Fprintf(fs.Output(), "\nEnvironment: VLLM_SIM_<FLAG> sets any flag; PYTHONHASHSEED fixes block hashes;\n"+
			"VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0 sends 32-byte hashes; LMCACHE_CHUNK_SIZE,\n"+
			"LMCACHE_LOCAL_CPU and LMCACHE_MAX_LOCAL_CPU_SIZE (GB) size the LMCache L1;\n"+
			"LMCACHE_REMOTE_URL names its L2; OTEL_EXPORTER_OTLP_TRACES_PROTOCOL (grpc, the\n"+
			"default, or http/protobuf) and OTEL_SERVICE_NAME (default vllm) shape tracing.\n")
	}
	if err := flagenv.Apply(fs, "VLLM_SIM_"); err != nil {
		return err
	}
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if *listPresets {
		return timing.WriteTable(os.Stdout, o.BlockSize, o.GPUMemoryUtilization)
	}
	if *noPrefix {
		o.EnablePrefixCaching = false
	}
	if *served != "" {
		for _, n := range strings.Split(*served, ",") {
			if n = strings.TrimSpace(n); n != "" {
				o.ServedModelNames = append(o.ServedModelNames, n)
			}
		}
	}
	switch *encoding {
	case "map":
		o.KVEventsEncoding = kvevents.MapEncoding
	case "positional":
		o.KVEventsEncoding = kvevents.Positional
	default:
		return fmt.Errorf("--kv-events-encoding must be map or positional, got %q", *encoding)
	}
	mode, err := lmcache.ParseEventMode(*lmEvents)
	if err != nil {
		return fmt.Errorf("--lmcache-kv-events: %w", err)
	}
	o.LMCache.Events = mode
	if err := upstreamEnv(&o); err != nil {
		return err
	}
	log, err := telemetry.NewLogger(os.Stderr, *logLevel, *logFormat)
	if err != nil {
		return err
	}
	o.Log = log

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	a, err := app.New(ctx, o)
	if err != nil {
		return err
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", net.JoinHostPort(*host, strconv.Itoa(*port)))
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	log.Info("serving", "addr", ln.Addr().String(), "kv_events", a.KVEventsAddr(), "kv_events_replay", a.KVEventsReplayAddr())
	return a.Serve(ctx, ln, *grace)
}

// upstreamEnv applies the environment variables vLLM and LMCache read.
func upstreamEnv(o *app.Options) error {
	o.HashSeed = os.Getenv("PYTHONHASHSEED")
	if v, ok := os.LookupEnv("VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES"); ok {
		o.KVEventsIntHashes = v != "0" && !strings.EqualFold(v, "false")
	}
	if v, ok := os.LookupEnv("LMCACHE_CHUNK_SIZE"); ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return fmt.Errorf("LMCACHE_CHUNK_SIZE=%q: want a positive integer", v)
		}
		o.LMCache.ChunkSize = n
	}
	if v, ok := os.LookupEnv("LMCACHE_LOCAL_CPU"); ok {
		b, err := strconv.ParseBool(strings.ToLower(v))
		if err != nil {
			return fmt.Errorf("LMCACHE_LOCAL_CPU=%q: %w", v, err)
		}
		o.LMCache.LocalCPU = b
	}
	if v, ok := os.LookupEnv("LMCACHE_MAX_LOCAL_CPU_SIZE"); ok {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f < 0 {
			return fmt.Errorf("LMCACHE_MAX_LOCAL_CPU_SIZE=%q: want a non-negative number of GB", v)
		}
		o.LMCache.MaxLocalCPUSizeGB = f
	}
	if v, ok := os.LookupEnv("LMCACHE_REMOTE_URL"); ok && o.LMCache.RemoteURL == "" {
		o.LMCache.RemoteURL = v
	}
	if o.OTLPTracesEndpoint != "" {
		p, err := app.TracesProtocol(os.LookupEnv)
		if err != nil {
			return err
		}
		o.OTLPTracesProtocol = p
	}
	return nil
}
