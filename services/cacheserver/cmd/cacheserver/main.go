// Command cacheserver is warmpath's L2 KV cache: LMCache workers store and
// fetch KV chunks over lm://; tools use HTTP. This file only wires flags
// to the packages.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/net/netutil"

	"github.com/warmpath/warmpath/libs/flagenv"
	"github.com/warmpath/warmpath/libs/httpserve"
	"github.com/warmpath/warmpath/libs/telemetry"
	"github.com/warmpath/warmpath/libs/tlsconf"
	"github.com/warmpath/warmpath/services/cacheserver/internal/cluster"
	"github.com/warmpath/warmpath/services/cacheserver/internal/httpapi"
	"github.com/warmpath/warmpath/services/cacheserver/internal/l2events"
	"github.com/warmpath/warmpath/services/cacheserver/internal/lmserver"
	"github.com/warmpath/warmpath/services/cacheserver/internal/memlimit"
	"github.com/warmpath/warmpath/services/cacheserver/internal/metrics"
	"github.com/warmpath/warmpath/services/cacheserver/internal/resp"
	"github.com/warmpath/warmpath/services/cacheserver/internal/store"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "cacheserver:", err)
		os.Exit(1)
	}
}

// nodeStore is the node's own store as run hands it out: the memory tier
// alone (*store.Memory) or over the disk tier (*store.Tiered). Each server
// declares the part it uses; this is only their union, for the one
// variable that holds either tier.
type nodeStore interface {
	httpapi.Store      // Get, Put, Delete, Now, Tiers
	cluster.LocalStore // Contains, for lm://
	resp.Node          // Expires and SetExpires
	l2events.Source    // Observe, Present, Range
}

// run serves until ctx ends or a listener fails.
func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("cacheserver", flag.ContinueOnError)
	lmListen := fs.String("lm-listen", "0.0.0.0:65432", "address for LMCache's lm:// protocol")
	peerListen := fs.String("peer-listen", "", "cluster mode: lm:// address peers forward to (serves this node's store only); empty: no cluster")
	advertise := fs.String("advertise", "", "cluster mode: this node's peer address as peers know it (default: --peer-listen)")
	peers := fs.String("peers", "", "cluster mode: comma-separated peer addresses (host:port of their --peer-listen)")
	peersDNS := fs.String("peers-dns", "", "cluster mode: a headless Service name whose addresses are the peers (port: --peer-listen's)")
	peersEvery := fs.Duration("peers-refresh", 10*time.Second, "how often --peers-dns is resolved again")
	replicas := fs.Int("replicas", 1, "cluster mode: nodes holding each key (1 or 2)")
	peerTimeout := fs.Duration("peer-timeout", 500*time.Millisecond, "cluster mode: deadline of one forwarded request (what a hung peer costs a request before it is ejected)")
	peerEject := fs.Int("peer-eject-failures", 3, "cluster mode: consecutive failed forwards after which a peer is skipped (its keys are misses) for a backoff")
	peerBackoff := fs.Duration("peer-backoff-max", 30*time.Second, "cluster mode: longest a failing peer is skipped (the backoff starts at 1s and doubles per failed probe)")
	respListen := fs.String("resp-listen", "0.0.0.0:6379", "address for RESP (Redis protocol): LMCache's redis connector, redis-cli, go-redis")
	passwordFile := fs.String("password-file", "", "file holding the password RESP clients must AUTH with (or the password itself in "+envPassword+"; default: none)")
	httpListen := fs.String("http-listen", "0.0.0.0:8080", "address for HTTP: /v1/objects, /healthz, /readyz, /metrics, /v1/stats")
	objectsListen := fs.String("objects-listen", "", "address for the data API (/v1/objects, /v1/stats) apart from --http-listen, which then serves only /healthz, /readyz and /metrics; empty: all on --http-listen")
	httpTokenFile := fs.String("http-token-file", "", "file holding the bearer token HTTP clients must send on /v1/objects and /v1/stats (or the token itself in "+envHTTPToken+"; default: none)")
	metricsAuth := fs.Bool("metrics-auth", false, "require the HTTP bearer token on /metrics too (default: /metrics is open, like /healthz and /readyz)")
	tlsCert := fs.String("tls-cert-file", "", "PEM certificate (chain) for RESP and HTTP; with --tls-key-file, both serve TLS only (lm:// stays plaintext); reloaded when the files change")
	tlsKey := fs.String("tls-key-file", "", "PEM private key of --tls-cert-file")
	tlsClientCA := fs.String("tls-client-ca-file", "", "PEM CA bundle: RESP and HTTP clients must present a certificate it signed (mutual TLS)")
	memCap := fs.Int64("memory-capacity-bytes", 4<<30, "bytes the memory tier holds, per-entry overhead included")
	goMemLimit := fs.Int64("go-memory-limit-bytes", 0, "the Go runtime's soft memory limit; 0: GOMEMLIMIT if set, else 90% of the container's cgroup memory limit, else 1.125 x --memory-capacity-bytes + 32 MiB")
	incoming := fs.Int64("incoming-bytes", 0, "lm:// PUT values being received at once, counted against --memory-capacity-bytes (more wait their turn); 0: a quarter of it")
	writeBehind := fs.Int64("write-behind-bytes", 0, "objects evicted from memory waiting for the disk tier, counted against --memory-capacity-bytes (beyond it they are dropped); 0: an eighth of it")
	maxConns := fs.Int("max-connections", 1024, "open connections per listener (lm://, RESP, peers); more wait in the accept backlog")
	diskDir := fs.String("disk-dir", "", "directory of the disk tier (objects evicted from memory are written behind here, promoted back on a hit); empty: memory only")
	diskCap := fs.Int64("disk-capacity-bytes", 100<<30, "bytes the disk tier holds, counted in 4 KiB blocks with the file being written included (give its volume a few MiB more)")
	ttl := fs.Duration("ttl", 0, "expiry given to every object stored without one (RESP SET EX/PX and HTTP's X-Warmpath-TTL-Seconds set their own); 0: objects never expire")
	maxValue := fs.Int("max-value-bytes", 256<<20, "largest object accepted (a larger lm:// PUT closes the connection)")
	kvEndpoint := fs.String("kv-events-endpoint", "", "ZMQ PUB address the store's KV events (BlockStored/BlockRemoved per LMCache chunk, topic l2@<model>) are published on, e.g. tcp://*:5557 (binds when it holds * or ::, else connects); empty: no events")
	snapshotListen := fs.String("kv-events-snapshot-listen", "", "address serving GET /v1/kv-events/snapshot alone, without the HTTP token, for routers: the snapshot tells what the (unauthenticated) KV-event stream tells, so the two share one guard, the network policy; empty: the snapshot is served on the data API only, behind the token")
	kvReplay := fs.String("kv-events-replay-endpoint", "", "ZMQ ROUTER address (bound) replaying the last 10000 KV event batches on request, e.g. tcp://*:5558; empty: no replay")
	pprofAddr := fs.String("pprof-listen", "", "serve net/http/pprof on this address (e.g. 127.0.0.1:6060); off when empty")
	grace := fs.Duration("shutdown-grace", 10*time.Second, "time in-flight HTTP requests get on SIGTERM")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	logFormat := fs.String("log-format", "json", "json or text")
	if err := flagenv.Apply(fs, "WARMPATH_CACHESERVER_"); err != nil {
		return err
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if *maxConns < 1 {
		return fmt.Errorf("--max-connections %d: want 1 or more", *maxConns)
	}
	if *ttl < 0 {
		return fmt.Errorf("--ttl %v: want 0 (no expiry) or more", *ttl)
	}
	log, err := telemetry.NewLogger(os.Stderr, *logLevel, *logFormat)
	if err != nil {
		return err
	}
	if *pprofAddr != "" {
		go httpserve.ServePprof(ctx, *pprofAddr, log)
	}
	reg := telemetry.NewRegistry()
	limit, source, err := memlimit.Choose(os.LookupEnv, "/", *goMemLimit, *memCap+*memCap/8+32<<20)
	if err != nil {
		return err
	}
	if limit > 0 {
		debug.SetMemoryLimit(limit)
	}
	log.Info("go memory limit", "bytes", debug.SetMemoryLimit(-1), "source", source)
	memory := store.NewMemory(*memCap, store.Options{DefaultTTL: *ttl, ReserveLimit: *incoming})
	var mem nodeStore = memory
	var ready atomic.Bool
	ready.Store(true)
	var disk *store.Disk
	if *diskDir != "" {
		// The disk tier's index loads after the listeners are open (below):
		// a large tier then delays readiness, not the liveness probe.
		if disk, err = store.NewDisk(*diskDir, *diskCap, nil); err != nil {
			return err
		}
		ready.Store(false)
		tiered := store.NewTiered(ctx, memory, disk, *writeBehind, log)
		defer tiered.Wait() // drain the write-behind queue on the way out
		mem = tiered
	}
	m := metrics.New(reg, mem)
	// Before the listeners and the disk tier's load: every object is seen.
	events, err := startKVEvents(ctx, *kvEndpoint, *kvReplay, mem, m, log)
	if err != nil {
		return err
	}
	defer events.stop()

	var lc net.ListenConfig
	lmLn, err := lc.Listen(ctx, "tcp", *lmListen)
	if err != nil {
		return fmt.Errorf("listen lm://: %w", err)
	}
	respLn, err := lc.Listen(ctx, "tcp", *respListen)
	if err != nil {
		return fmt.Errorf("listen resp: %w", err)
	}
	// Each connection costs buffers and, mid-request, a value: a cap keeps
	// a connection storm from turning into memory.
	lmLn, respLn = netutil.LimitListener(lmLn, *maxConns), netutil.LimitListener(respLn, *maxConns)
	password, err := secret(*passwordFile, envPassword)
	if err != nil {
		return err
	}
	token, err := secret(*httpTokenFile, envHTTPToken)
	if err != nil {
		return err
	}
	if *metricsAuth && token == "" {
		return errors.New("--metrics-auth needs an HTTP token (--http-token-file or " + envHTTPToken + ")")
	}
	httpLn, err := lc.Listen(ctx, "tcp", *httpListen)
	if err != nil {
		return fmt.Errorf("listen http: %w", err)
	}
	var objectsLn net.Listener
	if *objectsListen != "" {
		if objectsLn, err = lc.Listen(ctx, "tcp", *objectsListen); err != nil {
			return fmt.Errorf("listen objects: %w", err)
		}
	}
	var snapshotSrv *http.Server
	var snapshotLn net.Listener
	if *snapshotListen != "" {
		if events.snapshot == nil {
			return errors.New("--kv-events-snapshot-listen needs --kv-events-endpoint")
		}
		if snapshotLn, err = lc.Listen(ctx, "tcp", *snapshotListen); err != nil {
			return fmt.Errorf("listen kv-events snapshot: %w", err)
		}
		snapshotLn = netutil.LimitListener(snapshotLn, *maxConns)
		snapshotSrv = httpserve.New(snapshotOnly(events.snapshot), log)
	}
	if tf := (tlsconf.Files{CertFile: *tlsCert, KeyFile: *tlsKey, ClientCAFile: *tlsClientCA}); tf.Enabled() {
		tlsCfg, err := tlsconf.Server(tf, 0, log)
		if err != nil {
			return err
		}
		respLn, httpLn = tls.NewListener(respLn, tlsCfg), tls.NewListener(httpLn, tlsCfg)
		if objectsLn != nil {
			objectsLn = tls.NewListener(objectsLn, tlsCfg)
		}
		log.Info("tls on resp and http", "cert", *tlsCert, "client_ca", *tlsClientCA)
	}
	api := httpapi.Handler(httpapi.Config{MaxValueBytes: int64(*maxValue), Token: token, ProtectMetrics: *metricsAuth, Ready: ready.Load, KVEventsSnapshot: events.snapshot}, mem, m, reg)
	var objectsSrv *http.Server
	if objectsLn != nil {
		var data http.Handler
		api, data = splitHTTP(api)
		objectsSrv = httpserve.New(data, log)
	}
	hs := httpserve.New(api, log)
	errc := make(chan error, 8)
	var backend lmserver.Backend = cluster.Local{Mem: mem}
	respCfg := resp.Config{Limits: resp.Limits{MaxArgBytes: *maxValue}, Password: password}
	if *peerListen != "" {
		peerLn, err := lc.Listen(ctx, "tcp", *peerListen)
		if err != nil {
			return fmt.Errorf("listen peers: %w", err)
		}
		peerLn = netutil.LimitListener(peerLn, *maxConns)
		self := *advertise
		if self == "" {
			self = peerLn.Addr().String()
		}
		cl := cluster.New(cluster.Config{Self: self, Replicas: *replicas, MaxValueBytes: *maxValue,
			Timeout: *peerTimeout, FailuresToEject: *peerEject, MaxBackoff: *peerBackoff}, mem, m.Forwarded)
		if *peers != "" {
			cl.SetPeers(strings.Split(*peers, ","))
		}
		if *peersDNS != "" {
			go cluster.WatchDNS(ctx, cl, *peersDNS, portOf(*peerListen), *peersEvery, log)
		}
		backend = cl
		respCfg.Clustered = true // RESP reaches other nodes' keys as lm:// does
		go func() {
			errc <- lmserver.New(lmserver.Config{MaxValueBytes: *maxValue, Reserve: memory}, cluster.Local{Mem: mem}, m, log).Serve(ctx, peerLn)
		}()
		log.Info("cluster mode", "self", self, "replicas", *replicas)
	}
	go func() {
		errc <- lmserver.New(lmserver.Config{MaxValueBytes: *maxValue, Reserve: memory}, backend, m, log).Serve(ctx, lmLn)
	}()
	go func() {
		errc <- resp.New(respCfg, backend, mem, m, log).Serve(ctx, respLn)
	}()
	go func() { errc <- hs.Serve(httpLn) }()
	if disk != nil {
		go func() {
			start := time.Now()
			if err := disk.Load(); err != nil {
				errc <- err
				return
			}
			ready.Store(true)
			log.Info("disk tier loaded", "dir", *diskDir, "capacity_bytes", *diskCap, "objects", disk.Stats().Objects, "took", time.Since(start).String())
		}()
	}
	if objectsSrv != nil {
		go func() { errc <- objectsSrv.Serve(objectsLn) }()
		log.Info("objects api", "listen", objectsLn.Addr().String())
	}
	snapshotAddr := ""
	if snapshotSrv != nil {
		go func() { errc <- snapshotSrv.Serve(snapshotLn) }()
		snapshotAddr = snapshotLn.Addr().String()
	}
	log.Info("serving", "lm", lmLn.Addr().String(), "resp", respLn.Addr().String(), "http", httpLn.Addr().String(), "memory_capacity_bytes", *memCap, "ttl", ttl.String(), "kv_events", events.addr, "kv_events_snapshot", snapshotAddr)
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	httpserve.Shutdown(ctx, hs, *grace, log)
	for _, srv := range []*http.Server{objectsSrv, snapshotSrv} {
		if srv != nil {
			httpserve.Shutdown(ctx, srv, *grace, log)
		}
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// Secrets may come from the environment instead of a file; they have no
// flags of their own, so they never show in a process listing.
const (
	envPassword  = "WARMPATH_CACHESERVER_PASSWORD"
	envHTTPToken = "WARMPATH_CACHESERVER_HTTP_TOKEN"
)

// secret reads a credential from path (surrounding whitespace trimmed),
// else from the environment variable env; "" when neither is set. Setting
// both is an error rather than a silent choice.
func secret(path, env string) (string, error) {
	v, inEnv := os.LookupEnv(env)
	if path == "" {
		return strings.TrimSpace(v), nil
	}
	if inEnv {
		return "", fmt.Errorf("%s and its file flag are both set: choose one", env)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("secret: %w", err)
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return "", fmt.Errorf("secret: %s is empty", path)
	}
	return s, nil
}

// portOf returns the port of a host:port address.
func portOf(addr string) string {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return ""
	}
	return port
}
