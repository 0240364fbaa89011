// Command bench-l2 measures warmpath's cache server against Redis (Debian's
// redis-server, persistence off) under the same Go client load — 8
// connections, 80% GET / 20% SET over a small key set, values of 4 MiB and
// 32 MiB — over RESP for both, over lm:// for the cache server, next to a
// raw TCP transfer ceiling, all on loopback in one run. It writes
// bench/results/l2_throughput.json (make bench-l2).
package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/warmpath/warmpath/libs/lmproto"
	"github.com/warmpath/warmpath/tools/bench/proc"
	"github.com/warmpath/warmpath/tools/bench/report"
)

func main() {
	out := flag.String("out", "bench/results/l2_throughput.json", "report path")
	dur := flag.Duration("duration", 8*time.Second, "measured time per target and value size")
	conns := flag.Int("conns", 8, "concurrent connections")
	flag.Parse()
	if err := run(*out, *dur, *conns); err != nil {
		fmt.Fprintln(os.Stderr, "bench-l2:", err)
		os.Exit(1)
	}
}

// client is one connection's GET and SET.
type client interface {
	get(ctx context.Context, key string) (int, error)
	set(ctx context.Context, key string, val []byte) error
}

// respClient is go-redis: it allocates every GET reply, as most RESP
// clients (redis-py, under LMCache's redis connector, too) do.
type respClient struct{ c *redis.Client }

func (r respClient) get(ctx context.Context, key string) (int, error) {
	b, err := r.c.Get(ctx, key).Bytes()
	return len(b), err
}
func (r respClient) set(ctx context.Context, key string, val []byte) error {
	return r.c.Set(ctx, key, val, 0).Err()
}

// respStreamClient is rueidis streaming each reply into one reused
// buffer (DoStream), as lmClient reads over lm://: the client then costs a
// copy out of the socket and no allocation, so on two shared cores the
// servers, not the client's allocator, set the pace. Both commands go over
// the one dedicated connection DoStream uses.
type respStreamClient struct {
	c   rueidis.Client
	buf *sliceWriter
}

// sliceWriter appends to a slice whose capacity is kept between replies.
type sliceWriter struct{ b []byte }

func (w *sliceWriter) Write(p []byte) (int, error) {
	w.b = append(w.b, p...)
	return len(p), nil
}

// ReadFrom lets io.Copy read a reply straight into the kept capacity, in
// reads as large as the socket gives, instead of through the client's
// read buffer in small pieces.
func (w *sliceWriter) ReadFrom(r io.Reader) (int64, error) {
	var n int64
	for {
		if len(w.b) == cap(w.b) {
			w.b = slices.Grow(w.b, max(cap(w.b), 64<<10))
		}
		m, err := r.Read(w.b[len(w.b):cap(w.b)])
		w.b = w.b[:len(w.b)+m]
		n += int64(m)
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

func (r respStreamClient) get(ctx context.Context, key string) (int, error) {
	r.buf.b = r.buf.b[:0]
	st := r.c.DoStream(ctx, r.c.B().Get().Key(key).Build())
	n, err := st.WriteTo(r.buf)
	return int(n), err
}

func (r respStreamClient) set(ctx context.Context, key string, val []byte) error {
	st := r.c.DoStream(ctx, r.c.B().Set().Key(key).Value(rueidis.BinaryString(val)).Build())
	_, err := st.WriteTo(io.Discard)
	return err
}

// lmClient reads every value into one buffer, as LMCache's client reads
// into a preallocated tensor.
type lmClient struct {
	c   *lmproto.Client
	buf *[]byte
}

func (l lmClient) get(ctx context.Context, key string) (int, error) {
	b, _, err := l.c.GetInto(ctx, key, *l.buf)
	if cap(b) > cap(*l.buf) {
		*l.buf = b
	}
	return len(b), err
}
func (l lmClient) set(ctx context.Context, key string, val []byte) error {
	return l.c.Put(ctx, key, lmproto.Meta{Dtype: 3}, val)
}

// failing is a client that could not be made: every call fails, and the
// run counts the errors.
type failing struct{ err error }

func (f failing) get(context.Context, string) (int, error)  { return 0, f.err }
func (f failing) set(context.Context, string, []byte) error { return f.err }

type result struct {
	GetGBps, SetGBps, GetP99ms float64
	Errors                     int
}

// load runs the 80/20 mix on conns clients for d.
func load(ctx context.Context, mk func() client, conns int, size int, d time.Duration) result {
	val := make([]byte, size)
	for i := range val {
		val[i] = byte(i)
	}
	const keys = 8
	seed := mk()
	for k := range keys {
		_ = seed.set(ctx, "bench-"+strconv.Itoa(k), val)
	}
	var mu sync.Mutex
	var getBytes, setBytes int64
	var lat []float64
	errs := 0
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	for w := range conns {
		wg.Go(func() {
			c := mk()
			r := rand.New(rand.NewPCG(uint64(w), 7))
			var gb, sb int64
			var l []float64
			e := 0
			for time.Now().Before(end) {
				key := "bench-" + strconv.Itoa(r.IntN(keys))
				if r.IntN(10) < 8 {
					t0 := time.Now()
					n, err := c.get(ctx, key)
					if err != nil {
						e++
						continue
					}
					l = append(l, float64(time.Since(t0).Microseconds())/1e3)
					gb += int64(n)
				} else {
					if err := c.set(ctx, key, val); err != nil {
						e++
						continue
					}
					sb += int64(size)
				}
			}
			mu.Lock()
			getBytes += gb
			setBytes += sb
			lat = append(lat, l...)
			errs += e
			mu.Unlock()
		})
	}
	wg.Wait()
	slices.Sort(lat)
	res := result{GetGBps: float64(getBytes) / d.Seconds() / 1e9, SetGBps: float64(setBytes) / d.Seconds() / 1e9, Errors: errs}
	if len(lat) > 0 {
		res.GetP99ms = lat[len(lat)*99/100]
	}
	return res
}

// tcpCeiling is a raw transfer: each request (4-byte length) gets that
// many bytes back from a preallocated buffer.
func tcpCeiling(conns, size int, d time.Duration) (float64, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	buf := make([]byte, size)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				var hdr [4]byte
				for {
					if _, err := io.ReadFull(c, hdr[:]); err != nil {
						return
					}
					if _, err := c.Write(buf[:binary.LittleEndian.Uint32(hdr[:])]); err != nil {
						return
					}
				}
			}()
		}
	}()
	var total int64
	var mu sync.Mutex
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	for range conns {
		wg.Go(func() {
			var d net.Dialer
			c, err := d.DialContext(context.Background(), "tcp", ln.Addr().String())
			if err != nil {
				return
			}
			defer c.Close()
			rb := make([]byte, size)
			var hdr [4]byte
			binary.LittleEndian.PutUint32(hdr[:], uint32(size))
			var n int64
			for time.Now().Before(end) {
				if _, err := c.Write(hdr[:]); err != nil {
					return
				}
				if _, err := io.ReadFull(c, rb); err != nil {
					return
				}
				n += int64(size)
			}
			mu.Lock()
			total += n
			mu.Unlock()
		})
	}
	wg.Wait()
	return float64(total) / d.Seconds() / 1e9, nil
}

func freeAddr() (string, error) {
	var lc net.ListenConfig
	l, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func waitTCP(addr string) error {
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		var d net.Dialer
		if c, err := d.DialContext(context.Background(), "tcp", addr); err == nil {
			return c.Close()
		}
	}
	return fmt.Errorf("%s never accepted a connection", addr)
}

func run(out string, d time.Duration, conns int) error {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "bench-l2")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin, err := proc.Build(ctx, dir, "github.com/warmpath/warmpath/services/cacheserver/cmd/cacheserver")
	if err != nil {
		return err
	}
	lmAddr, _ := freeAddr()
	respAddr, _ := freeAddr()
	httpAddr, _ := freeAddr()
	cs := exec.CommandContext(ctx, bin, "--lm-listen", lmAddr, "--resp-listen", respAddr, "--http-listen", httpAddr,
		"--memory-capacity-bytes", strconv.Itoa(4<<30), "--max-value-bytes", strconv.Itoa(64<<20), "--log-level", "warn")
	if err := cs.Start(); err != nil {
		return err
	}
	defer func() { _ = cs.Process.Kill(); _ = cs.Wait() }()
	redisBin, err := exec.LookPath("redis-server")
	if err != nil {
		return errors.New("redis-server not on PATH: make tools installs it")
	}
	redisAddr, _ := freeAddr()
	_, redisPort, _ := net.SplitHostPort(redisAddr)
	rs := exec.CommandContext(ctx, redisBin, "--port", redisPort, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--proto-max-bulk-len", "64mb", "--dir", dir)
	if err := rs.Start(); err != nil {
		return err
	}
	defer func() { _ = rs.Process.Kill(); _ = rs.Wait() }()
	for _, a := range []string{lmAddr, respAddr, redisAddr} {
		if err := waitTCP(a); err != nil {
			return err
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

	type row struct {
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
	var rows []row
	for _, size := range []int{4 << 20, 32 << 20} {
		// Redis is measured with each RESP client; lm:// is held against
		// Redis with the client that, like lm://'s, reuses its buffer.
		fmt.Fprintf(os.Stderr, "value %d MiB: redis (rueidis, streamed)…\n", size>>20)
		redisStream := load(ctx, respStream(redisAddr), conns, size, d)
		fmt.Fprintf(os.Stderr, "value %d MiB: redis (go-redis)…\n", size>>20)
		redisAlloc := load(ctx, resp(redisAddr), conns, size, d)
		ceil, err := tcpCeiling(conns, size, d)
		if err != nil {
			return err
		}
		for _, p := range []struct {
			name string
			mk   func() client
			r    result
		}{{"resp", respStream(respAddr), redisStream}, {"resp_goredis", resp(respAddr), redisAlloc}, {"lm", lm, redisStream}} {
			fmt.Fprintf(os.Stderr, "value %d MiB: warmpath %s…\n", size>>20, p.name)
			w, r := load(ctx, p.mk, conns, size, d), p.r
			rows = append(rows, row{Protocol: p.name, ValueBytes: size,
				RedisGetGBps: round(r.GetGBps), RedisSetGBps: round(r.SetGBps), RedisGetP99: round(r.GetP99ms),
				WarmpathGetGBps: round(w.GetGBps), WarmpathSetGBps: round(w.SetGBps), WarmpathGetP99: round(w.GetP99ms),
				TCPCeilingGBps: round(ceil), GetVsRedis: round(w.GetGBps / r.GetGBps), GetVsCeiling: round(w.GetGBps / ceil),
				Errors: r.Errors + w.Errors})
		}
	}
	rep := map[string]any{
		"timestamp": time.Now().UTC().Format(time.RFC3339), "cores": runtime.NumCPU(), "go_version": runtime.Version(),
		"connections": conns, "duration_s": d.Seconds(), "mix": "80% GET / 20% SET over 8 keys", "results": rows,
		"goal": "warmpath GET throughput >= 2x Redis at both sizes and >= 50% of the TCP ceiling",
	}
	if err := report.WriteJSON(out, rep); err != nil {
		return err
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(rep); err != nil {
		return err
	}
	return nil
}

func round(v float64) float64 { return float64(int64(v*1000)) / 1000 }
