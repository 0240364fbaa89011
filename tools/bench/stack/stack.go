// Package stack starts warmpath's local stack as child processes on
// loopback, from built binaries: simulated vLLM+LMCache workers, an
// optional cache server as their shared L2, and the router in front with
// one strategy. The demo and the live benchmarks start one per
// configuration, so every run begins with cold caches.
package stack

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/warmpath/warmpath/libs/testnet"
	"github.com/warmpath/warmpath/tools/bench/proc"
	simapp "github.com/warmpath/warmpath/tools/vllmsim/app"
)

// Config describes one stack.
type Config struct {
	// BinDir holds vllm-sim, router and cacheserver (make build's bin/).
	BinDir string
	// LogDir receives each process's log.
	LogDir   string
	Model    string
	Workers  int
	Strategy string
	// L2 starts a cache server and points every worker's LMCache at it.
	L2 bool
	// SimArgs are extra vllm-sim flags for every worker (preset, cache sizes).
	SimArgs []string
	// SimEnv is extra environment for every worker (LMCACHE_*).
	SimEnv    []string
	TimeScale float64
	// CacheBytes is the cache server's memory capacity.
	CacheBytes int64
	// RouterConfig, when set, is the router's routing file (JSON or YAML);
	// Strategy is then the file's strategy.
	RouterConfig string
	// L1CapacityTokens is each worker's LMCache L1 in tokens: kvaware's
	// router keeps its view of the L1 within it (--kv-cpu-capacity-tokens),
	// as the operator configures it; 0 leaves it unknown.
	L1CapacityTokens int
	// ReadyTimeout bounds each process's start (30s when zero).
	ReadyTimeout time.Duration
}

// Stack is a running stack.
type Stack struct {
	// RouterURL is the router's base URL (http://127.0.0.1:port).
	RouterURL string
	// WorkerURLs are the workers' base URLs.
	WorkerURLs []string
	// CacheURL is the cache server's HTTP base URL ("" without L2).
	CacheURL string
	procs    []*proc.Process
}

// Start starts the stack and waits until every part is ready; on failure
// it stops what it started and says which part failed and why.
func Start(ctx context.Context, cfg Config) (_ *Stack, err error) {
	if cfg.ReadyTimeout <= 0 {
		cfg.ReadyTimeout = 30 * time.Second
	}
	// Children run in their log directory: no path given them may be
	// relative.
	if cfg.BinDir, err = filepath.Abs(cfg.BinDir); err != nil {
		return nil, fmt.Errorf("stack: %w", err)
	}
	if cfg.LogDir, err = filepath.Abs(cfg.LogDir); err != nil {
		return nil, fmt.Errorf("stack: %w", err)
	}
	s := &Stack{}
	defer func() {
		if err != nil {
			_ = s.Stop()
		}
	}()
	ts := strconv.FormatFloat(cfg.TimeScale, 'g', -1, 64)
	var remote, l2Events, l2Snapshot string
	if cfg.L2 {
		addrs, err := testnet.PickAddrs(ctx, 5)
		if err != nil {
			return nil, fmt.Errorf("stack: cache server addresses: %w", err)
		}
		lm, resp, httpAddr := addrs[0], addrs[1], addrs[2]
		_, eventsPort, _ := net.SplitHostPort(addrs[3])
		// The cache server publishes what it holds, and a kvaware router
		// follows it, as the operator wires them on a cluster.
		l2Events, l2Snapshot = "tcp://"+addrs[3], "http://"+addrs[4]
		p, err := s.start(ctx, cfg, "cacheserver", []string{filepath.Join(cfg.BinDir, "cacheserver"),
			"--lm-listen", lm, "--resp-listen", resp, "--http-listen", httpAddr,
			"--kv-events-endpoint", "tcp://*:" + eventsPort, "--kv-events-snapshot-listen", addrs[4],
			"--memory-capacity-bytes", strconv.FormatInt(cfg.CacheBytes, 10), "--log-format", "text"}, nil)
		if err != nil {
			return nil, err
		}
		s.CacheURL = "http://" + httpAddr
		if err := p.WaitReady(ctx, s.CacheURL+"/readyz", cfg.ReadyTimeout); err != nil {
			return nil, fmt.Errorf("stack: cache server: %w", err)
		}
		remote = "lm://" + lm
	}
	kvaware := cfg.Strategy == "kvaware"
	workers := make([]*proc.Process, cfg.Workers)
	// Workers bind their ports only once started, so a later probe could
	// be handed a port an earlier worker was given and has not bound yet.
	taken := map[int]bool{}
	for i := range cfg.Workers {
		port, err := testnet.PickPortRun(ctx, "127.0.0.1", 3, taken)
		if err != nil {
			return nil, fmt.Errorf("stack: worker %d ports: %w", i, err)
		}
		argv := []string{filepath.Join(cfg.BinDir, "vllm-sim"), "--host", "127.0.0.1", "--port", strconv.Itoa(port),
			"--model", cfg.Model, "--time-scale", ts, "--worker-id", strconv.Itoa(i), "--log-format", "text",
			"--kv-transfer-config", `{"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both"}`}
		if kvaware {
			argv = append(argv, "--kv-events-config", fmt.Sprintf(
				`{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:%d","replay_endpoint":"tcp://*:%d","topic":"kv"}`,
				port+1, port+2))
		}
		if remote != "" {
			argv = append(argv, "--lmcache-remote-url", remote)
		}
		argv = append(argv, cfg.SimArgs...)
		env := append([]string{"PYTHONHASHSEED=0"}, cfg.SimEnv...)
		if workers[i], err = s.start(ctx, cfg, "worker-"+strconv.Itoa(i), argv, env); err != nil {
			return nil, err
		}
		s.WorkerURLs = append(s.WorkerURLs, "http://127.0.0.1:"+strconv.Itoa(port))
	}
	for i, w := range workers {
		if err := w.WaitReady(ctx, s.WorkerURLs[i]+"/health", cfg.ReadyTimeout); err != nil {
			return nil, fmt.Errorf("stack: worker %d: %w", i, err)
		}
	}
	listen, err := testnet.PickAddr(ctx)
	if err != nil {
		return nil, err
	}
	argv := []string{filepath.Join(cfg.BinDir, "router"), "--listen", listen, "--workers", strings.Join(s.WorkerURLs, ","),
		"--strategy", cfg.Strategy, "--log-format", "text", "--log-level", "warn"}
	if cfg.RouterConfig != "" {
		path := filepath.Join(cfg.LogDir, "router-config.yaml")
		if err := os.WriteFile(path, []byte(cfg.RouterConfig), 0o644); err != nil {
			return nil, fmt.Errorf("stack: router config: %w", err)
		}
		argv = append(argv, "--config", path)
	}
	if kvaware {
		argv = append(argv, "--kv-events-endpoint", "tcp://{host}:{port+1}", "--kv-events-replay-endpoint", "tcp://{host}:{port+2}",
			"--tokenizer-local", localTokenizer(cfg.Model, cfg.SimArgs))
		if cfg.L1CapacityTokens > 0 {
			argv = append(argv, "--kv-cpu-capacity-tokens", strconv.Itoa(cfg.L1CapacityTokens))
		}
		if l2Events != "" {
			argv = append(argv, "--l2-events-endpoints", l2Events, "--l2-snapshot-urls", l2Snapshot, "--l2-hash-seed", "0")
		}
	}
	r, err := s.start(ctx, cfg, "router", argv, nil)
	if err != nil {
		return nil, err
	}
	s.RouterURL = "http://" + listen
	if err := r.WaitReady(ctx, s.RouterURL+"/ready", cfg.ReadyTimeout); err != nil {
		return nil, fmt.Errorf("stack: router: %w", err)
	}
	return s, nil
}

func (s *Stack) start(_ context.Context, cfg Config, name string, argv, env []string) (*proc.Process, error) {
	p, err := proc.Start(name, cfg.LogDir, argv, env)
	if err != nil {
		return nil, fmt.Errorf("stack: %w", err)
	}
	s.procs = append(s.procs, p)
	return p, nil
}

// Stop stops every process, the router first.
func (s *Stack) Stop() error {
	var errs []error
	for i := len(s.procs) - 1; i >= 0; i-- {
		if err := s.procs[i].Stop(5 * time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	s.procs = nil
	return errors.Join(errs...)
}

// localTokenizer is the router's --tokenizer-local for the workers: their
// vocabulary and chat template, so kvaware tokenizes completion prompts
// and chats in-process instead of asking a worker's /tokenize each time.
// It reads the workers' --tokenizer and --chat-template, whose defaults
// are the simulator's own.
func localTokenizer(model string, simArgs []string) string {
	def := simapp.DefaultOptions()
	vals := map[string]*string{"tokenizer": &def.Tokenizer, "chat-template": &def.ChatTemplate}
	for i, a := range simArgs {
		if !strings.HasPrefix(a, "-") {
			continue
		}
		name, v, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		dst, ok := vals[name]
		switch {
		case !ok:
		case hasValue:
			*dst = v
		case i+1 < len(simArgs):
			*dst = simArgs[i+1]
		}
	}
	return model + "=" + def.Tokenizer + ":" + def.ChatTemplate
}
