// Package l2bench measures warmpath's cache server against Redis (Debian's
// redis-server, persistence off) under the same Go client load — 80% GET /
// 20% SET over a small key set, values of 4 MiB and 32 MiB — over RESP for
// both, over lm:// for the cache server, next to a raw TCP transfer
// ceiling, all on loopback in one run (make bench-l2, docs/benchmarks.md).
package l2bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/warmpath/warmpath/libs/gobuild"
	"github.com/warmpath/warmpath/libs/lmproto"
	"github.com/warmpath/warmpath/libs/parentdeath"
	"github.com/warmpath/warmpath/libs/testnet"
)

// cacheServerPackage is built for each run, so the figures are the tree's.
const cacheServerPackage = "github.com/warmpath/warmpath/services/cacheserver/cmd/cacheserver"

// Config is one run.
type Config struct {
	// Duration is the measured time per target and value size.
	Duration time.Duration
	// Conns is the concurrent connections of each target's load.
	Conns int
	// Progress receives a line as each measurement starts; nil: none.
	Progress io.Writer
}

// Report is what a run writes to bench/results/l2_throughput.json. Its
// fields are in the order of the keys of the map it replaced.
type Report struct {
	Connections int     `json:"connections"`
	Cores       int     `json:"cores"`
	DurationS   float64 `json:"duration_s"`
	GoVersion   string  `json:"go_version"`
	Goal        string  `json:"goal"`
	Mix         string  `json:"mix"`
	Results     []Row   `json:"results"`
	Timestamp   string  `json:"timestamp"`
}

// Row is one protocol at one value size, against Redis and the ceiling.
type Row struct {
	Protocol        string  `json:"protocol"`
	ValueBytes      int     `json:"value_bytes"`
	RedisGetGBps    float64 `json:"redis_get_gbps"`
	RedisSetGBps    float64 `json:"redis_set_gbps"`
	WarmpathGetGBps float64 `json:"warmpath_get_gbps"`
	WarmpathSetGBps float64 `json:"warmpath_set_gbps"`
	WarmpathGetP99  float64 `json:"warmpath_get_p99_ms"`
	RedisGetP99     float64 `json:"redis_get_p99_ms"`
	TCPCeilingGBps  float64 `json:"tcp_ceiling_gbps"`
	GetVsRedis      float64 `json:"warmpath_get_vs_redis"`
	GetVsCeiling    float64 `json:"warmpath_get_vs_tcp_ceiling"`
	Errors          int     `json:"errors"`
}

// Run builds and starts the cache server and Redis, measures every
// protocol at every value size and stops them again.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	progress := cfg.Progress
	if progress == nil {
		progress = io.Discard
	}
	dir, err := os.MkdirTemp("", "bench-l2")
	if err != nil {
		return nil, fmt.Errorf("l2bench: %w", err)
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "cacheserver")
	if err := gobuild.Build(ctx, "", cacheServerPackage, bin); err != nil {
		return nil, fmt.Errorf("l2bench: %w", err)
	}
	addrs, err := testnet.PickAddrs(ctx, 4)
	if err != nil {
		return nil, fmt.Errorf("l2bench: %w", err)
	}
	lmAddr, respAddr, httpAddr, redisAddr := addrs[0], addrs[1], addrs[2], addrs[3]
	cs := exec.CommandContext(ctx, bin, "--lm-listen", lmAddr, "--resp-listen", respAddr, "--http-listen", httpAddr,
		"--memory-capacity-bytes", strconv.Itoa(4<<30), "--max-value-bytes", strconv.Itoa(64<<20), "--log-level", "warn")
	parentdeath.Tie(cs, syscall.SIGKILL)
	if err := cs.Start(); err != nil {
		return nil, fmt.Errorf("l2bench: start the cache server: %w", err)
	}
	defer func() { _ = cs.Process.Kill(); _ = cs.Wait() }()
	redisBin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, errors.New("l2bench: redis-server not on PATH: make tools installs it")
	}
	_, redisPort, _ := net.SplitHostPort(redisAddr)
	rs := exec.CommandContext(ctx, redisBin, "--port", redisPort, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--proto-max-bulk-len", "64mb", "--dir", dir)
	parentdeath.Tie(rs, syscall.SIGKILL)
	if err := rs.Start(); err != nil {
		return nil, fmt.Errorf("l2bench: start redis-server: %w", err)
	}
	defer func() { _ = rs.Process.Kill(); _ = rs.Wait() }()
	for _, a := range []string{lmAddr, respAddr, redisAddr} {
		if err := waitTCP(ctx, a); err != nil {
			return nil, err
		}
	}
	resp := func(addr string) func() client {
		return func() client {
			return respClient{redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, PoolSize: 1, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second})}
		}
	}
	respStream := func(addr string) func() client {
		return func() client {
			c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, AlwaysRESP2: true, DisableCache: true,
				BlockingPoolSize: 1, ConnWriteTimeout: 10 * time.Second, Dialer: net.Dialer{Timeout: 10 * time.Second}})
			if err != nil {
				return failing{err}
			}
			return respStreamClient{c: c, buf: &sliceWriter{}}
		}
	}
	lm := func() client { return lmClient{c: lmproto.Dial(lmAddr, 10*time.Second, 64<<20), buf: new([]byte)} }

	d, conns := cfg.Duration, cfg.Conns
	var rows []Row
	for _, size := range []int{4 << 20, 32 << 20} {
		// Redis is measured with each RESP client; lm:// is held against
		// Redis with the client that, like lm://'s, reuses its buffer.
		fmt.Fprintf(progress, "value %d MiB: redis (rueidis, streamed)…\n", size>>20)
		redisStream := load(ctx, respStream(redisAddr), conns, size, d)
		fmt.Fprintf(progress, "value %d MiB: redis (go-redis)…\n", size>>20)
		redisAlloc := load(ctx, resp(redisAddr), conns, size, d)
		ceil, err := tcpCeiling(ctx, conns, size, d)
		if err != nil {
			return nil, fmt.Errorf("l2bench: TCP ceiling: %w", err)
		}
		for _, p := range []struct {
			name string
			mk   func() client
			r    result
		}{{"resp", respStream(respAddr), redisStream}, {"resp_goredis", resp(respAddr), redisAlloc}, {"lm", lm, redisStream}} {
			fmt.Fprintf(progress, "value %d MiB: warmpath %s…\n", size>>20, p.name)
			w, r := load(ctx, p.mk, conns, size, d), p.r
			rows = append(rows, Row{Protocol: p.name, ValueBytes: size,
				RedisGetGBps: round(r.GetGBps), RedisSetGBps: round(r.SetGBps), RedisGetP99: round(r.GetP99ms),
				WarmpathGetGBps: round(w.GetGBps), WarmpathSetGBps: round(w.SetGBps), WarmpathGetP99: round(w.GetP99ms),
				TCPCeilingGBps: round(ceil), GetVsRedis: round(w.GetGBps / r.GetGBps), GetVsCeiling: round(w.GetGBps / ceil),
				Errors: r.Errors + w.Errors})
		}
	}
	return &Report{
		Timestamp: time.Now().UTC().Format(time.RFC3339), Cores: runtime.NumCPU(), GoVersion: runtime.Version(),
		Connections: conns, DurationS: d.Seconds(), Mix: "80% GET / 20% SET over 8 keys", Results: rows,
		Goal: "warmpath GET throughput >= 2x Redis at both sizes and >= 50% of the TCP ceiling",
	}, nil
}

// waitTCP waits until addr accepts a connection.
func waitTCP(ctx context.Context, addr string) error {
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		var d net.Dialer
		if c, err := d.DialContext(ctx, "tcp", addr); err == nil {
			return c.Close()
		}
	}
	return fmt.Errorf("l2bench: %s never accepted a connection", addr)
}

func round(v float64) float64 { return float64(int64(v*1000)) / 1000 }
