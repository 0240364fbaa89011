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
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/warmpath/warmpath/libs/flagenv"
	"github.com/warmpath/warmpath/libs/httpserve"
	"github.com/warmpath/warmpath/libs/telemetry"
	"github.com/warmpath/warmpath/services/cacheserver/internal/cluster"
	"github.com/warmpath/warmpath/services/cacheserver/internal/httpapi"
	"github.com/warmpath/warmpath/services/cacheserver/internal/lmserver"
	"github.com/warmpath/warmpath/services/cacheserver/internal/metrics"
	"github.com/warmpath/warmpath/services/cacheserver/internal/resp"
	"github.com/warmpath/warmpath/services/cacheserver/internal/store"
	"github.com/warmpath/warmpath/services/cacheserver/internal/tlsconf"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "cacheserver:", err)
		os.Exit(1)
	}
}

func run() error {
	fs := flag.NewFlagSet("cacheserver", flag.ContinueOnError)
	lmListen := fs.String("lm-listen", "0.0.0.0:65432", "address for LMCache's lm:// protocol")
	peerListen := fs.String("peer-listen", "", "cluster mode: lm:// address peers forward to (serves this node's store only); empty: no cluster")
	advertise := fs.String("advertise", "", "cluster mode: this node's peer address as peers know it (default: --peer-listen)")
	peers := fs.String("peers", "", "cluster mode: comma-separated peer addresses (host:port of their --peer-listen)")
	peersDNS := fs.String("peers-dns", "", "cluster mode: a headless Service name whose addresses are the peers (port: --peer-listen's)")
	peersEvery := fs.Duration("peers-refresh", 10*time.Second, "how often --peers-dns is resolved again")
	replicas := fs.Int("replicas", 1, "cluster mode: nodes holding each key (1 or 2)")
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
	diskDir := fs.String("disk-dir", "", "directory of the disk tier (objects evicted from memory are written behind here, promoted back on a hit); empty: memory only")
	diskCap := fs.Int64("disk-capacity-bytes", 100<<30, "bytes the disk tier holds")
	ttl := fs.Duration("ttl", 0, "expiry given to every object stored without one (RESP SET EX/PX and HTTP's X-Warmpath-TTL-Seconds set their own); 0: objects never expire")
	maxValue := fs.Int("max-value-bytes", 256<<20, "largest object accepted (a larger lm:// PUT closes the connection)")
	pprofAddr := fs.String("pprof-listen", "", "serve net/http/pprof on this address (e.g. 127.0.0.1:6060); off when empty")
	grace := fs.Duration("shutdown-grace", 10*time.Second, "time in-flight HTTP requests get on SIGTERM")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	logFormat := fs.String("log-format", "json", "json or text")
	if err := flagenv.Apply(fs, "WARMPATH_CACHESERVER_"); err != nil {
		return err
	}
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if *ttl < 0 {
		return fmt.Errorf("--ttl %v: want 0 (no expiry) or more", *ttl)
	}
	log, err := telemetry.NewLogger(os.Stderr, *logLevel, *logFormat)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	if *pprofAddr != "" {
		go httpserve.ServePprof(ctx, *pprofAddr, log)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	memory := store.NewMemory(*memCap, store.Options{DefaultTTL: *ttl})
	var mem store.Store = memory
	if *diskDir != "" {
		disk, err := store.OpenDisk(*diskDir, *diskCap, nil)
		if err != nil {
			return err
		}
		tiered := store.NewTiered(ctx, memory, disk, 1024, log)
		defer tiered.Wait() // drain the write-behind queue on the way out
		mem = tiered
		log.Info("disk tier", "dir", *diskDir, "capacity_bytes", *diskCap, "objects", disk.Stats().Objects)
	}
	m := metrics.New(reg, mem)

	var lc net.ListenConfig
	lmLn, err := lc.Listen(ctx, "tcp", *lmListen)
	if err != nil {
		return fmt.Errorf("listen lm://: %w", err)
	}
	respLn, err := lc.Listen(ctx, "tcp", *respListen)
	if err != nil {
		return fmt.Errorf("listen resp: %w", err)
	}
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
	api := httpapi.Handler(httpapi.Config{MaxValueBytes: int64(*maxValue), Token: token, ProtectMetrics: *metricsAuth}, mem, m, reg)
	var objectsSrv *http.Server
	if objectsLn != nil {
		var data http.Handler
		api, data = splitHTTP(api)
		objectsSrv = httpserve.New(data, log)
	}
	hs := httpserve.New(api, log)
	errc := make(chan error, 5)
	var backend lmserver.Backend = cluster.Local{Mem: mem}
	if *peerListen != "" {
		peerLn, err := lc.Listen(ctx, "tcp", *peerListen)
		if err != nil {
			return fmt.Errorf("listen peers: %w", err)
		}
		self := *advertise
		if self == "" {
			self = peerLn.Addr().String()
		}
		cl := cluster.New(cluster.Config{Self: self, Replicas: *replicas, MaxValueBytes: *maxValue}, mem, m.Forwarded)
		if *peers != "" {
			cl.SetPeers(strings.Split(*peers, ","))
		}
		if *peersDNS != "" {
			go cluster.WatchDNS(ctx, cl, *peersDNS, portOf(*peerListen), *peersEvery, log)
		}
		backend = cl
		go func() {
			errc <- lmserver.New(lmserver.Config{MaxValueBytes: *maxValue}, cluster.Local{Mem: mem}, m, log).Serve(ctx, peerLn)
		}()
		log.Info("cluster mode", "self", self, "replicas", *replicas)
	}
	go func() {
		errc <- lmserver.New(lmserver.Config{MaxValueBytes: *maxValue}, backend, m, log).Serve(ctx, lmLn)
	}()
	go func() {
		errc <- resp.New(resp.Config{Limits: resp.Limits{MaxArgBytes: *maxValue}, Password: password}, mem, m, log).Serve(ctx, respLn)
	}()
	go func() { errc <- hs.Serve(httpLn) }()
	if objectsSrv != nil {
		go func() { errc <- objectsSrv.Serve(objectsLn) }()
		log.Info("objects api", "listen", objectsLn.Addr().String())
	}
	log.Info("serving", "lm", lmLn.Addr().String(), "resp", respLn.Addr().String(), "http", httpLn.Addr().String(), "memory_capacity_bytes", *memCap, "ttl", ttl.String())
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	httpserve.Shutdown(ctx, hs, *grace, log)
	if objectsSrv != nil {
		httpserve.Shutdown(ctx, objectsSrv, *grace, log)
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
