// Command router is warmpath's cache-aware OpenAI-compatible router. It
// discovers vLLM workers (static list, DNS, or Kubernetes EndpointSlices),
// health-checks and scrapes them, and routes each request with the
// configured strategy (prefixaware by default). Every flag can also be set
// as WARMPATH_ROUTER_<FLAG> (dashes become underscores).
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/gin-gonic/gin"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/warmpath/warmpath/libs/flagenv"
	"github.com/warmpath/warmpath/libs/httpserve"
	"github.com/warmpath/warmpath/libs/telemetry"
	"github.com/warmpath/warmpath/libs/tlsconf"
	"github.com/warmpath/warmpath/libs/zmtpguard"
	"github.com/warmpath/warmpath/services/router/internal/apikeys"
	"github.com/warmpath/warmpath/services/router/internal/app"
	"github.com/warmpath/warmpath/services/router/internal/discovery"
	"github.com/warmpath/warmpath/services/router/internal/kvredis"
	"github.com/warmpath/warmpath/services/router/internal/kvsub"
	"github.com/warmpath/warmpath/services/router/internal/l2learn"
	"github.com/warmpath/warmpath/services/router/internal/l2view"
	"github.com/warmpath/warmpath/services/router/internal/limiter"
	"github.com/warmpath/warmpath/services/router/internal/probe"
	"github.com/warmpath/warmpath/services/router/internal/proxy"
	"github.com/warmpath/warmpath/services/router/internal/tokenizer"
	"github.com/warmpath/warmpath/services/router/kvindex"
	"github.com/warmpath/warmpath/services/router/strategy"
)

func main() {
	// gin's mode is process-wide, so the binary sets it, once, rather than
	// whichever constructor runs first; release mode keeps gin from printing
	// its routes and debug warnings.
	gin.SetMode(gin.ReleaseMode)
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "router:", err)
		os.Exit(1)
	}
}

func run() error {
	fs := flag.NewFlagSet("router", flag.ContinueOnError)
	listen := fs.String("listen", "0.0.0.0:8080", "address to serve the OpenAI API on")
	var sf sourceFlags
	fs.StringVar(&sf.workers, "workers", "", "static worker list: comma-separated base URLs (http://host:port)")
	fs.StringVar(&sf.dnsName, "dns-name", "", "discover workers from this DNS name (a headless Service)")
	fs.IntVar(&sf.dnsPort, "dns-port", 8000, "worker port for --dns-name")
	fs.DurationVar(&sf.dnsInterval, "dns-interval", 5*time.Second, "how often to re-resolve --dns-name")
	fs.StringVar(&sf.k8sNamespace, "k8s-namespace", "", "discover workers from EndpointSlices in this namespace")
	fs.StringVar(&sf.k8sSelector, "k8s-selector", "", "label selector for the EndpointSlices (e.g. kubernetes.io/service-name=workers)")
	fs.StringVar(&sf.k8sPort, "k8s-port", "http", "worker port name or number in the EndpointSlices")
	fs.StringVar(&sf.kubeconfig, "kubeconfig", "", "kubeconfig path (default: in-cluster)")
	configPath := fs.String("config", "", "routing configuration file (YAML/JSON), reloaded on change and on SIGHUP")
	strategyName := fs.String("strategy", "prefixaware", "routing strategy when no --config: prefixaware, session, roundrobin, kvaware")
	var kv kvsub.Config
	fs.StringVar(&kv.Endpoint, "kv-events-endpoint", "", "each worker's KV-event PUB socket, a template over its URL: {host}, {port}, {port+N} (e.g. tcp://{host}:5557); enables kvaware")
	fs.StringVar(&kv.Bind, "kv-events-bind", "", "bind one SUB socket here (e.g. tcp://0.0.0.0:5557) that workers connect to, each naming itself in its topic (its URL, or kv@host:port@model); the other topology to --kv-events-endpoint")
	fs.StringVar(&kv.ReplayEndpoint, "kv-events-replay-endpoint", "", "each worker's KV-event replay socket, same template (e.g. tcp://{host}:5558); without it gaps are counted, not repaired")
	fs.DurationVar(&kv.ReplayTimeout, "kv-events-replay-timeout", 5*time.Second, "timeout of one replay request")
	fs.Uint64Var(&kv.MaxFrameBytes, "kv-events-max-frame-bytes", zmtpguard.DefaultMaxFrame, "largest ZMTP frame a KV-event or replay peer may announce; a peer announcing more is disconnected before anything is allocated")
	fs.Uint64Var(&kv.MaxMessageBytes, "kv-events-max-message-bytes", zmtpguard.DefaultMaxMessage, "largest KV-event message (all its frames, plus 32 bytes per frame) a peer may send")
	fs.DurationVar(&kv.HandshakeTimeout, "kv-events-handshake-timeout", zmtpguard.DefaultHandshakeTimeout, "time a KV-event or replay peer has for its ZMTP handshake")
	cpuEvents := fs.String("kv-cpu-events", "store-only", "what workers' LMCache CPU tier (L1) publishes: store-only (current LMCache: stores, never evictions; the router keeps a view bounded by --kv-cpu-capacity-tokens), none (nothing: learnt from the router's own decisions) or full (stores and evictions)")
	fs.IntVar(&kv.Tiers[kvindex.CPU].CapacityTokens, "kv-cpu-capacity-tokens", 0, "each worker's LMCache L1 in tokens (max_local_cpu_size over the model's KV bytes per token); the router's view of it never holds more. 0: unknown (store-only views are then bounded only by --kv-index-max-worker-blocks, and none learns nothing)")
	fs.IntVar(&kv.Tiers[kvindex.CPU].ChunkTokens, "kv-cpu-chunk-tokens", 256, "LMCache's chunk_size, the unit --kv-cpu-events=none learns in")
	l2Events := fs.String("l2-events-endpoints", "", "warmpath cache servers' KV-event PUB sockets, comma-separated tcp://host:port (each node's --kv-events-endpoint; cluster mode: every node); kvaware then credits every worker with the prompt's leading chunks the L2 holds")
	l2Snapshots := fs.String("l2-snapshot-urls", "", "the same cache servers' data API base URLs (http://host:8080), comma-separated in the same order; the router fetches /v1/kv-events/snapshot from them on connect and after any gap")
	l2DNS := fs.String("l2-dns-name", "", "a DNS name resolving to every cache server (the cache server chart's headless <name>-peers Service); the router follows the servers it resolves to as they come and go, instead of --l2-events-endpoints")
	l2DNSHTTPPort := fs.Int("l2-dns-http-port", 8080, "with --l2-dns-name: the cache servers' data API port (snapshots)")
	l2DNSEventsPort := fs.Int("l2-dns-events-port", 5557, "with --l2-dns-name: the cache servers' KV-event PUB port (their --kv-events-endpoint)")
	l2DNSScheme := fs.String("l2-dns-scheme", "http", "with --l2-dns-name: the data API's scheme, http or https")
	var l2 l2view.Config
	fs.StringVar(&l2.TokenFile, "l2-token-file", "", "file holding the cache servers' bearer token (reread at each snapshot)")
	fs.IntVar(&l2.ChunkTokens, "l2-chunk-tokens", 256, "LMCache's chunk_size: the tokens one L2 chunk holds")
	fs.StringVar(&l2.HashSeed, "l2-hash-seed", "", "the workers' PYTHONHASHSEED, which LMCache's chunk hashes chain from; required with --l2-events-endpoints or --l2-dns-name")
	var l2learnCfg l2learn.Config
	fs.IntVar(&l2learnCfg.CapacityTokens, "l2-learn-capacity-tokens", 0, "for an L2 that publishes nothing (Redis): its size in tokens (memory over the model's KV bytes per token); kvaware then takes every whole chunk a worker prefilled as written through to it, within that size; 0: off. Not with --l2-events-endpoints")
	fs.IntVar(&l2.MaxChunks, "l2-max-chunks", 4<<20, "chunks the router's L2 view holds over all models (about 40 bytes each); chunks beyond are left out (the L2 is credited with less) until removals free room")
	fs.DurationVar(&l2.DropAfter, "l2-drop-after", 10*time.Second, "how long a cache server may stay disconnected before its chunks stop being credited")
	fs.DurationVar(&l2.SnapshotTimeout, "l2-snapshot-timeout", 10*time.Second, "timeout of one snapshot request")
	kvRedis := fs.String("kv-index-redis", "", "keep the kvaware index in Redis, shared by every router replica pointed at it: redis://host:port/db (rediss:// for TLS), or a Redis/Valkey Cluster as redis-cluster://host:port[,host:port...] (rediss-cluster:// for TLS); default: in memory")
	kvMaxKeys := fs.Int("kv-index-max-keys", 1<<22, "block keys the kvaware index holds (about 82 bytes each); least recently stored beyond")
	kvWorkerMax := fs.Int("kv-index-max-worker-blocks", kvindex.DefaultMaxWorkerBlocks, "KV-event state kept per worker, in engine blocks (about 88 bytes each; an offloaded block spanning N GPU blocks counts 1+N); least recently stored or used beyond, which also leaves the index, so lost removals age out")
	var rc kvredis.Config
	fs.DurationVar(&rc.Timeout, "kv-index-redis-timeout", 200*time.Millisecond, "timeout of one Redis lookup (commits and clear chunks get 4x)")
	fs.IntVar(&rc.BreakerFailures, "kv-index-redis-breaker-failures", 5, "Redis calls failing in a row that open the breaker (lookups then use this replica's own index)")
	fs.DurationVar(&rc.BreakerOpen, "kv-index-redis-breaker-open", 5*time.Second, "how long the open Redis breaker fails calls at once before one probe")
	fs.IntVar(&rc.ChunkSize, "kv-index-redis-chunk", 500, "block keys one Redis script touches when clearing or resyncing a worker")
	var tc tokenizer.Config
	fs.DurationVar(&tc.Timeout, "tokenize-timeout", 500*time.Millisecond, "kvaware: timeout of a worker /tokenize call (on failure the request is routed by prefixaware)")
	fs.IntVar(&tc.CacheEntries, "tokenize-cache-entries", 4096, "kvaware: tokenized prompts kept")
	fs.Int64Var(&tc.CacheBytes, "tokenize-cache-bytes", tokenizer.DefaultCacheBytes, "kvaware: memory the tokenized prompts kept may take (4 bytes a token, ~160 per prompt); least recently used beyond")
	localTok := fs.String("tokenizer-local", "", "kvaware: tokenize in-process for these models, model=encoding[:template][,...] (tiktoken encodings: cl100k_base, o200k_base, p50k_base, r50k_base); with a chat template (llama3, chatml, or jinja:PATH to a tokenizer_config.json or bare Jinja template) chats too, else chats ask the worker")

	var pc proxy.Config
	fs.Int64Var(&pc.MaxBodyBytes, "max-body-bytes", 32<<20, "largest request body (413 beyond)")
	fs.IntVar(&pc.MaxConnections, "max-connections", 4096, "client connections served at once; more are refused with 503 (with --max-body-bytes, bounds the memory request bodies take)")
	fs.DurationVar(&pc.ConnectTimeout, "connect-timeout", 3*time.Second, "timeout to connect to a worker")
	fs.DurationVar(&pc.TTFBTimeout, "ttfb-timeout", 120*time.Second, "timeout for the first response byte from a worker (504)")
	fs.DurationVar(&pc.IdleTimeout, "idle-timeout", 60*time.Second, "longest gap between two response chunks")
	fs.DurationVar(&pc.TotalTimeout, "request-timeout", 10*time.Minute, "timeout for a whole request")
	fs.IntVar(&pc.MaxRetries, "max-retries", 2, "other workers to try, before the first byte, after a failure --retry-on names")
	pc.RetryOn = proxy.DefaultRetryOn
	fs.Func("retry-on", "failures retried on another worker, comma-separated: connect-failure (not sent), refused (429, or 503 with Retry-After), reset (connection lost after the request was sent), 5xx, timeout (no response byte within --ttfb-timeout: a hung worker); none (default "+proxy.DefaultRetryOn.String()+": only what the worker cannot have run)", func(v string) error {
		r, err := proxy.ParseRetryOn(v)
		pc.RetryOn = r
		return err
	})
	fs.IntVar(&pc.PanicPercent, "panic-threshold-percent", 50, "when fewer than this percentage of a model's workers are healthy, route to all of them (Envoy's panic mode; 0 = never)")
	fs.DurationVar(&pc.WriteTimeout, "client-write-timeout", 60*time.Second, "timeout to write a whole non-streamed response to a client (streams: --idle-timeout per write)")
	fs.IntVar(&pc.MaxPerWorker, "max-concurrent-per-worker", 0, "router requests in flight per worker (0 = unlimited)")
	apiKey := fs.String("api-key", "", "require this bearer token from clients (see also --api-key-file)")
	apiKeyFile := fs.String("api-key-file", "", "a file of bearer tokens clients may present, one per line (# starts a comment; a mounted Secret): reread when it changes, so keys rotate without a restart")
	var tf tlsconf.Files
	fs.StringVar(&tf.CertFile, "tls-cert-file", "", "serve clients over TLS with this PEM certificate (chain), reloaded when it changes (cert-manager, a rotated Secret)")
	fs.StringVar(&tf.KeyFile, "tls-key-file", "", "the certificate's PEM private key")
	fs.StringVar(&tf.ClientCAFile, "tls-client-ca-file", "", "require client certificates that chain to a CA in this PEM file (mutual TLS)")
	fs.IntVar(&pc.Ejection.ConsecutiveFailures, "eject-after", 3, "eject a worker after this many consecutive failures (0 = never)")
	fs.DurationVar(&pc.Ejection.BaseDuration, "eject-base", 5*time.Second, "first ejection length (doubles per repeat)")
	fs.DurationVar(&pc.Ejection.MaxDuration, "eject-max", 2*time.Minute, "longest ejection")
	fs.IntVar(&pc.Ejection.MaxEjectedPercent, "eject-max-percent", 50, "most of a model's workers ejected at once, in percent (one may always be; 0 = no bound)")

	var pf peerFlags
	fs.StringVar(&pf.list, "peers", "", "the router replicas of this endpoint, comma-separated base URLs (this one included, as --peer-self): each cache-aware request is routed by the replica that owns its prompt's head, the others relaying it there, so replicas agree on where a prefix is cached")
	fs.StringVar(&pf.dnsName, "peers-dns-name", "", "find the router replicas from this DNS name (a headless Service over the router pods, re-resolved every --dns-interval) instead of --peers")
	fs.IntVar(&pf.dnsPort, "peers-dns-port", 8080, "with --peers-dns-name: the replicas' port")
	peerLoad := fs.Duration("peer-load-interval", 100*time.Millisecond, "with --peers or --peers-dns-name: how often this replica reads the others' in-flight requests per worker (GET /peers/load), so each sees the whole fleet's load between scrapes; negative: never (the scrape alone)")
	fs.StringVar(&pf.self, "peer-self", "", "this replica's base URL as the peers' list names it (in Kubernetes http://$(POD_IP):8080); required with --peers or --peers-dns-name")

	var lc limiter.Config
	fs.IntVar(&lc.MaxConcurrent, "max-concurrent-requests", 0, "requests in progress (0 = unlimited); the config file's requestLimits override")
	fs.IntVar(&lc.MaxQueue, "max-queue-size", 1024, "requests waiting for a slot beyond max-concurrent-requests")
	fs.IntVar(&lc.OverflowStatus, "overflow-status-code", 429, "status when the queue is full (429 or 503)")
	fs.DurationVar(&lc.QueueTimeout, "queue-timeout", 30*time.Second, "longest wait for a slot")

	var prc probe.Config
	fs.DurationVar(&prc.HealthInterval, "health-interval", 2*time.Second, "active health check interval")
	fs.DurationVar(&prc.ScrapeInterval, "scrape-interval", time.Second, "worker /metrics scrape interval")
	fs.DurationVar(&prc.Timeout, "probe-timeout", 2*time.Second, "timeout of one health check or scrape")

	gcPercent := fs.Int("gc-percent", 400, "Go GC target percentage (GOGC); a proxy's live heap is small, so the default 100 collects every few hundred requests and shows in tail latency. Ignored when GOGC is set")
	pprofAddr := fs.String("pprof-listen", "", "serve net/http/pprof on this address (e.g. 127.0.0.1:6060); off when empty")
	var shutdown app.Stop
	fs.DurationVar(&shutdown.Drain, "drain-delay", 0, "on SIGTERM, keep accepting this long with /ready failing and every response closing its connection, so load balancers (kube-proxy, an ingress) stop sending new connections first; then stop accepting. In Kubernetes: the time endpoint changes take to reach them (the operator sets 5s)")
	fs.DurationVar(&shutdown.Grace, "shutdown-grace", 30*time.Second, "once accepting stops, time in-flight requests (streams included) get to finish before their connections are closed")
	otlp := fs.String("otlp-endpoint", "", "OTLP/HTTP trace collector URL (or OTEL_EXPORTER_OTLP_ENDPOINT)")
	sample := fs.Float64("trace-sample-ratio", 1, "fraction of root requests traced")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	logFormat := fs.String("log-format", "json", "json or text")
	fs.Float64Var(&pc.RoutedLogPerSecond, "log-routed-per-second", 1, "routing decisions logged at INFO (routed lines, a token-bucket sample) per second; the rest at DEBUG. 0: DEBUG only")
	fs.DurationVar(&prc.StatusInterval, "log-worker-status-interval", time.Minute, "log a worker cache status line per healthy worker this often: scraped GPU KV usage, requests, LMCache's hit rate over the interval. 0: off")

	if err := flagenv.Apply(fs, "WARMPATH_ROUTER_"); err != nil {
		return err
	}
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	cpuSource, err := kvindex.ParseEventSource(*cpuEvents)
	if err != nil {
		return fmt.Errorf("--kv-cpu-events: %w", err)
	}
	kv.Tiers[kvindex.CPU].Events = cpuSource
	l2learnCfg.ChunkTokens = l2.ChunkTokens
	if pc.RoutedLogPerSecond < 0 || prc.StatusInterval < 0 {
		return errors.New("--log-routed-per-second and --log-worker-status-interval must not be negative")
	}
	if kv.Tiers[kvindex.CPU].CapacityTokens < 0 || kv.Tiers[kvindex.CPU].ChunkTokens < 1 {
		return errors.New("--kv-cpu-capacity-tokens must not be negative and --kv-cpu-chunk-tokens must be positive")
	}
	if l2.Endpoints, err = l2view.ParseEndpoints(*l2Events, *l2Snapshots); err != nil {
		return fmt.Errorf("--l2-events-endpoints, --l2-snapshot-urls: %w", err)
	}
	l2.Limits = zmtpguard.Limits{MaxFrame: kv.MaxFrameBytes, MaxMessage: kv.MaxMessageBytes, HandshakeTimeout: kv.HandshakeTimeout}
	log, err := telemetry.NewLogger(os.Stderr, *logLevel, *logFormat)
	if err != nil {
		return err
	}
	if pc.APIKeys, err = apikeys.New(*apiKey, *apiKeyFile, 0, log); err != nil {
		return fmt.Errorf("--api-key-file: %w", err)
	}
	var serverTLS *tls.Config
	if tf.Enabled() {
		if serverTLS, err = tlsconf.Server(tf, 0, log); err != nil {
			return err
		}
	}
	var l2Discovery discovery.Source
	if *l2DNS != "" {
		if len(l2.Endpoints) > 0 {
			return errors.New("--l2-dns-name and --l2-events-endpoints: give one")
		}
		if *l2DNSEventsPort < 1 || *l2DNSEventsPort > 65535 {
			return fmt.Errorf("--l2-dns-events-port %d: want 1-65535", *l2DNSEventsPort)
		}
		if l2Discovery, err = discovery.NewDNS(discovery.DNSConfig{Name: *l2DNS, Port: *l2DNSHTTPPort, Scheme: *l2DNSScheme,
			Log: log.With("component", "l2-discovery")}); err != nil {
			return fmt.Errorf("--l2-dns-name: %w", err)
		}
	}
	if _, set := os.LookupEnv("GOGC"); !set && *gcPercent > 0 {
		debug.SetGCPercent(*gcPercent)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	tp, shutdownTracing, err := telemetry.SetupTracing(ctx, telemetry.TracingConfig{ServiceName: "warmpath-router", OTLPEndpoint: *otlp, SampleRatio: *sample})
	if err != nil {
		return err
	}
	defer func() { _ = shutdownTracing(context.Background()) }()

	src, err := source(sf, log)
	if err != nil {
		return err
	}
	pf.dnsInterval = sf.dnsInterval
	peerSrc, self, err := peerSource(pf, log)
	if err != nil {
		return err
	}
	routing := strategy.Defaults()
	routing.Name = *strategyName
	if *localTok != "" {
		if tc.Local, err = tokenizer.ParseLocal(*localTok); err != nil {
			return err
		}
	}
	a, err := app.New(ctx, app.Options{
		Discovery: src, Peers: peerSrc, PeerSelf: self, PeerLoadInterval: *peerLoad, TLS: serverTLS, ConfigPath: *configPath, Routing: routing, Limits: lc,
		Proxy: pc, Probe: prc, Tracer: tp.Tracer("warmpath-router"), Log: log,
		KVEvents: kv, KVIndexMaxKeys: *kvMaxKeys, KVWorkerMaxBlocks: *kvWorkerMax, KVIndexRedis: *kvRedis, KVRedis: rc, Tokenizer: tc, L2: l2, L2Discovery: l2Discovery, L2EventsPort: *l2DNSEventsPort, L2Learn: l2learnCfg,
	})
	if err != nil {
		return err
	}
	if *pprofAddr != "" {
		go httpserve.ServePprof(ctx, *pprofAddr, log)
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		for range hup {
			_ = a.Reload()
		}
	}()
	var lcfg net.ListenConfig
	ln, err := lcfg.Listen(ctx, "tcp", *listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	log.Info("serving", "addr", ln.Addr().String(), "strategy", a.Strategy(), "tls", serverTLS != nil, "api_keys", pc.APIKeys.Enabled())
	return a.Run(ctx, ln, shutdown)
}

// peerFlags are the flags naming the router's peer replicas (peerSource).
type peerFlags struct {
	list, dnsName, self string
	dnsPort             int
	dnsInterval         time.Duration
}

// peerSource builds the source of the router's peer replicas and
// normalises this replica's URL as the source reports it: nil when neither
// --peers nor --peers-dns-name is given.
func peerSource(f peerFlags, log *slog.Logger) (discovery.Source, string, error) {
	list, dnsName := f.list, f.dnsName
	if list == "" && dnsName == "" {
		return nil, "", nil
	}
	if list != "" && dnsName != "" {
		return nil, "", errors.New("--peers and --peers-dns-name: give one")
	}
	self, err := discovery.NormalizeURL(f.self)
	if err != nil {
		return nil, "", fmt.Errorf("--peer-self (required with --peers or --peers-dns-name): %w", err)
	}
	if list != "" {
		src, err := discovery.Static(discovery.ParseList(list))
		if err != nil {
			return nil, "", fmt.Errorf("--peers: %w", err)
		}
		return src, self, nil
	}
	src, err := discovery.NewDNS(discovery.DNSConfig{Name: dnsName, Port: f.dnsPort, Interval: f.dnsInterval, Log: log.With("component", "peers")})
	if err != nil {
		return nil, "", fmt.Errorf("--peers-dns-name: %w", err)
	}
	return src, self, nil
}

// sourceFlags are the discovery flags; exactly one source may be set
// (source).
type sourceFlags struct {
	workers      string
	dnsName      string
	dnsPort      int
	dnsInterval  time.Duration
	k8sNamespace string
	k8sSelector  string
	k8sPort      string
	kubeconfig   string
}

// source builds the one configured discovery source.
func source(f sourceFlags, log *slog.Logger) (discovery.Source, error) {
	n := 0
	for _, set := range []bool{f.workers != "", f.dnsName != "", f.k8sNamespace != "" || f.k8sSelector != ""} {
		if set {
			n++
		}
	}
	if n != 1 {
		return nil, errors.New("give exactly one discovery source: --workers, --dns-name, or --k8s-namespace with --k8s-selector")
	}
	switch {
	case f.workers != "":
		return discovery.Static(discovery.ParseList(f.workers))
	case f.dnsName != "":
		return discovery.NewDNS(discovery.DNSConfig{Name: f.dnsName, Port: f.dnsPort, Interval: f.dnsInterval, Log: log})
	}
	var cfg *rest.Config
	var err error
	if f.kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", f.kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes client config: %w", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return discovery.NewKubernetes(discovery.KubernetesConfig{Client: cs, Namespace: f.k8sNamespace, Selector: f.k8sSelector, Port: f.k8sPort, Log: log})
}
