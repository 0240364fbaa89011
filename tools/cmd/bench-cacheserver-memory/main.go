// Command bench-cacheserver-memory holds warmpath's cache server to its
// configured memory: a 256 MiB memory tier over a disk tier, under
// sustained PUT/GET churn (half each, over four times more keys than fit)
// from 64 lm:// connections, with 4 MiB then 32 MiB values, each for a
// fixed time on a fresh process. It records the process's peak RSS (the
// kernel's VmHWM) against the goal, 1.25 x the capacity + 64 MiB, and
// Redis's peak RSS under the same churn over RESP with maxmemory set to
// the same capacity (allkeys-lru, persistence off). It writes
// bench/results/cacheserver_memory.json (make bench-cacheserver-memory).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/warmpath/warmpath/libs/gobuild"
	"github.com/warmpath/warmpath/libs/lmproto"
	"github.com/warmpath/warmpath/libs/testnet"
	"github.com/warmpath/warmpath/tools/bench/proc"
	"github.com/warmpath/warmpath/tools/bench/procstat"
	"github.com/warmpath/warmpath/tools/bench/report"
)

const mib = 1 << 20

func main() {
	out := flag.String("out", "bench/results/cacheserver_memory.json", "report path")
	dur := flag.Duration("duration", 20*time.Second, "churn time per value size and server")
	conns := flag.Int("conns", 64, "concurrent connections")
	capacity := flag.Int64("capacity-bytes", 256*mib, "memory capacity given to both servers")
	redisToo := flag.Bool("redis", true, "measure Redis too (redis-server on PATH)")
	flag.Parse()
	if err := run(*out, *dur, *conns, *capacity, *redisToo); err != nil {
		fmt.Fprintln(os.Stderr, "bench-cacheserver-memory:", err)
		os.Exit(1)
	}
}

// client is one connection's GET and PUT.
type client interface {
	get(ctx context.Context, key string) error
	put(ctx context.Context, key string, val []byte) error
}

type lmClient struct {
	c   *lmproto.Client
	buf *[]byte
}

func (l lmClient) get(ctx context.Context, key string) error {
	b, _, err := l.c.GetInto(ctx, key, *l.buf)
	if cap(b) > cap(*l.buf) {
		*l.buf = b
	}
	if errors.Is(err, lmproto.ErrMiss) {
		return nil
	}
	return err
}

func (l lmClient) put(ctx context.Context, key string, val []byte) error {
	return l.c.Put(ctx, key, lmproto.Meta{Dtype: 3}, val)
}

type respClient struct{ c *redis.Client }

func (r respClient) get(ctx context.Context, key string) error {
	err := r.c.Get(ctx, key).Err()
	if errors.Is(err, redis.Nil) {
		return nil
	}
	return err
}

func (r respClient) put(ctx context.Context, key string, val []byte) error {
	return r.c.Set(ctx, key, val, 0).Err()
}

type churn struct {
	Ops, Errors int64
	FirstError  string `json:",omitempty"`
}

// load runs half GETs, half PUTs over keys keys from conns clients for d.
func load(ctx context.Context, mk func() client, conns, size, keys int, d time.Duration) churn {
	val := make([]byte, size)
	for i := range val {
		val[i] = byte(i)
	}
	var ops, errs atomic.Int64
	var first sync.Once
	var firstErr string
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	for w := range conns {
		wg.Go(func() {
			c := mk()
			r := rand.New(rand.NewPCG(uint64(w), 11))
			for time.Now().Before(end) {
				key := "mem-" + strconv.Itoa(r.IntN(keys))
				var err error
				if r.IntN(2) == 0 {
					err = c.get(ctx, key)
				} else {
					err = c.put(ctx, key, val)
				}
				if err != nil {
					errs.Add(1)
					first.Do(func() { firstErr = err.Error() })
					continue
				}
				ops.Add(1)
			}
		})
	}
	wg.Wait()
	return churn{Ops: ops.Load(), Errors: errs.Load(), FirstError: firstErr}
}

// peakRSS is the process's resident high-water mark (VmHWM), in bytes.
func peakRSS(pid int) (int64, error) {
	st, err := procstat.Read(pid)
	if err != nil {
		return 0, fmt.Errorf("peak rss: %w", err)
	}
	return st.PeakRSS, nil
}

type row struct {
	Server        string  `json:"server"`
	ValueBytes    int     `json:"value_bytes"`
	CapacityBytes int64   `json:"capacity_bytes"`
	PeakRSSBytes  int64   `json:"peak_rss_bytes"`
	PeakRSSMiB    float64 `json:"peak_rss_mib"`
	RSSVsCapacity float64 `json:"peak_rss_vs_capacity"`
	GoalBytes     int64   `json:"goal_bytes"`
	MeetsGoal     bool    `json:"meets_goal"`
	OpsPerSec     float64 `json:"ops_per_s"`
	Errors        int64   `json:"errors"`
	FirstError    string  `json:"first_error,omitempty"`
	StopError     string  `json:"stop_error,omitempty"`
}

func run(out string, d time.Duration, conns int, capacity int64, redisToo bool) error {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "bench-cacheserver-memory")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "cacheserver")
	if err := gobuild.Build(ctx, "", "github.com/warmpath/warmpath/services/cacheserver/cmd/cacheserver", bin); err != nil {
		return err
	}
	goal := capacity*5/4 + 64*mib
	var rows []row
	for _, size := range []int{4 * mib, 32 * mib} {
		keys := int(4 * capacity / int64(size)) // four times what fits: constant eviction
		fmt.Fprintf(os.Stderr, "value %d MiB: warmpath…\n", size/mib)
		r, err := measureWarmpath(ctx, bin, dir, capacity, size, keys, conns, d)
		if err != nil {
			return err
		}
		r.GoalBytes, r.MeetsGoal = goal, r.PeakRSSBytes <= goal
		rows = append(rows, r)
		if redisToo {
			fmt.Fprintf(os.Stderr, "value %d MiB: redis…\n", size/mib)
			r, err := measureRedis(ctx, dir, capacity, size, keys, conns, d)
			if err != nil {
				return err
			}
			r.GoalBytes, r.MeetsGoal = goal, r.PeakRSSBytes <= goal
			rows = append(rows, r)
		}
	}
	rep := map[string]any{
		"timestamp": time.Now().UTC().Format(time.RFC3339), "cores": runtime.NumCPU(), "go_version": runtime.Version(),
		"connections": conns, "duration_s": d.Seconds(), "capacity_bytes": capacity,
		"mix":     "50% GET / 50% PUT over 4x the keys that fit, fresh server per value size; warmpath over lm:// with a disk tier, Redis over RESP with maxmemory (allkeys-lru)",
		"goal":    "warmpath peak RSS <= 1.25 x capacity + 64 MiB at both sizes",
		"results": rows,
	}
	if err := report.WriteJSON(out, rep); err != nil {
		return err
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(rep); err != nil {
		return err
	}
	for _, r := range rows {
		if r.Server == "warmpath" && !r.MeetsGoal {
			return fmt.Errorf("warmpath peaked at %.0f MiB with %d MiB values; goal %d MiB", r.PeakRSSMiB, r.ValueBytes/mib, goal/mib)
		}
	}
	return nil
}

func finish(r *row, p *proc.Process, pid int, c churn, d time.Duration) error {
	peak, err := peakRSS(pid)
	if err != nil {
		return err
	}
	// A server that takes long to stop (draining a large write-behind
	// queue) is noted, not fatal: the memory figure stands.
	if err := p.Stop(10 * time.Second); err != nil {
		r.StopError = err.Error()
	}
	r.PeakRSSBytes, r.PeakRSSMiB = peak, round(float64(peak)/mib)
	r.RSSVsCapacity = round(float64(peak) / float64(r.CapacityBytes))
	r.OpsPerSec, r.Errors, r.FirstError = round(float64(c.Ops)/d.Seconds()), c.Errors, c.FirstError
	return nil
}

func measureWarmpath(ctx context.Context, bin, dir string, capacity int64, size, keys, conns int, d time.Duration) (row, error) {
	lm, err := testnet.PickAddr(ctx)
	if err != nil {
		return row{}, err
	}
	respAddr, _ := testnet.PickAddr(ctx)
	httpAddr, _ := testnet.PickAddr(ctx)
	disk := filepath.Join(dir, fmt.Sprintf("disk-%d", size))
	p, err := proc.Start(fmt.Sprintf("cacheserver-%dmib", size/mib), dir, []string{bin,
		"--lm-listen", lm, "--resp-listen", respAddr, "--http-listen", httpAddr,
		"--memory-capacity-bytes", strconv.FormatInt(capacity, 10), "--disk-dir", disk,
		"--disk-capacity-bytes", strconv.FormatInt(8*capacity, 10),
		"--max-value-bytes", strconv.Itoa(64 * mib), "--log-level", "warn"}, nil)
	if err != nil {
		return row{}, err
	}
	if err := p.WaitReady(ctx, "http://"+httpAddr+"/readyz", 30*time.Second); err != nil {
		_ = p.Stop(time.Second)
		return row{}, err
	}
	c := load(ctx, func() client {
		return lmClient{c: lmproto.Dial(lm, 30*time.Second, 64*mib), buf: new([]byte)}
	}, conns, size, keys, d)
	r := row{Server: "warmpath", ValueBytes: size, CapacityBytes: capacity}
	return r, finish(&r, p, p.Pid(), c, d)
}

func measureRedis(ctx context.Context, dir string, capacity int64, size, keys, conns int, d time.Duration) (row, error) {
	redisBin, err := exec.LookPath("redis-server")
	if err != nil {
		return row{}, errors.New("redis-server not on PATH: make tools installs it (or pass --redis=false)")
	}
	addr, err := testnet.PickAddr(ctx)
	if err != nil {
		return row{}, err
	}
	_, port, _ := net.SplitHostPort(addr)
	p, err := proc.Start(fmt.Sprintf("redis-%dmib", size/mib), dir, []string{redisBin, "--port", port, "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir, "--proto-max-bulk-len", "64mb",
		"--maxmemory", strconv.FormatInt(capacity, 10), "--maxmemory-policy", "allkeys-lru"}, nil)
	if err != nil {
		return row{}, err
	}
	if err := waitTCP(ctx, addr); err != nil {
		_ = p.Stop(time.Second)
		return row{}, err
	}
	c := load(ctx, func() client {
		return respClient{redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, PoolSize: 1,
			ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second})}
	}, conns, size, keys, d)
	r := row{Server: "redis", ValueBytes: size, CapacityBytes: capacity}
	return r, finish(&r, p, p.Pid(), c, d)
}

func waitTCP(ctx context.Context, addr string) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(15 * time.Second)
	for {
		var dl net.Dialer
		if c, err := dl.DialContext(ctx, "tcp", addr); err == nil {
			return c.Close()
		}
		select {
		case <-tick.C:
		case <-deadline:
			return fmt.Errorf("%s never accepted a connection", addr)
		}
	}
}

func round(v float64) float64 { return float64(int64(v*1000)) / 1000 }
