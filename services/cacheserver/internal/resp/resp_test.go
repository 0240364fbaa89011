package resp

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/warmpath/warmpath/services/cacheserver/internal/cluster"
	"github.com/warmpath/warmpath/services/cacheserver/internal/metrics"
	"github.com/warmpath/warmpath/services/cacheserver/internal/store"
)

func start(t *testing.T, cfg Config) (string, *store.Memory) {
	t.Helper()
	return startWith(t, cfg, store.Options{}, nil)
}

// startWith serves a memory tier built with opts, over TLS when tlsCfg is
// set.
func startWith(t *testing.T, cfg Config, opts store.Options, tlsCfg *tls.Config) (string, *store.Memory) {
	t.Helper()
	mem := store.NewMemory(256<<20, opts)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if tlsCfg != nil {
		ln = tls.NewListener(ln, tlsCfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	srv := New(cfg, cluster.Local{Mem: mem}, mem, metrics.New(prometheus.NewRegistry(), mem), slog.New(slog.DiscardHandler))
	go func() { done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return ln.Addr().String(), mem
}

func TestGoRedis(t *testing.T) {
	addr, _ := start(t, Config{})
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	ctx := context.Background()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte{0xAB}, 4<<20)
	if err := rdb.Set(ctx, "k", big, 0).Err(); err != nil {
		t.Fatal(err)
	}
	got, err := rdb.Get(ctx, "k").Bytes()
	if err != nil || !bytes.Equal(got, big) {
		t.Fatalf("get: %d bytes, %v", len(got), err)
	}
	if _, err := rdb.Get(ctx, "absent").Result(); !errors.Is(err, redis.Nil) {
		t.Fatalf("absent: %v", err)
	}
	vals, err := rdb.MGet(ctx, "k", "absent").Result()
	if err != nil || len(vals) != 2 || vals[1] != nil {
		t.Fatalf("mget: %v %v", vals, err)
	}
	if n, err := rdb.Exists(ctx, "k", "absent").Result(); n != 1 || err != nil {
		t.Fatalf("exists: %d %v", n, err)
	}
	if n, err := rdb.Del(ctx, "k").Result(); n != 1 || err != nil {
		t.Fatalf("del: %d %v", n, err)
	}
	if err := rdb.Do(ctx, "NOSUCHCOMMAND").Err(); err == nil || !strings.Contains(err.Error(), "unknown command") {
		t.Fatalf("unknown command: %v", err)
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("connection unusable after an unknown command: %v", err)
	}
}

// TestLMCacheRedisConnector replays what LMCache's redis connector sends
// (reference/lmcache.md): suffixed kv_bytes and metadata keys.
func TestLMCacheRedisConnector(t *testing.T) {
	addr, _ := start(t, Config{})
	rdb := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2})
	defer rdb.Close()
	ctx := context.Background()
	key := "Llama-3.1-8B@1@0@abc123@bfloat16"
	meta := bytes.Repeat([]byte{1}, 28)
	kv := bytes.Repeat([]byte{2}, 1<<20)
	if err := rdb.Do(ctx, "CLIENT", "SETINFO", "lib-name", "redis-py").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Set(ctx, key+"kv_bytes", kv, 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Set(ctx, key+"metadata", meta, 0).Err(); err != nil {
		t.Fatal(err)
	}
	if n, _ := rdb.Exists(ctx, key+"metadata").Result(); n != 1 {
		t.Fatal("contains: metadata not found")
	}
	m, _ := rdb.Get(ctx, key+"metadata").Bytes()
	v, _ := rdb.Get(ctx, key+"kv_bytes").Bytes()
	if !bytes.Equal(m, meta) || !bytes.Equal(v, kv) {
		t.Fatal("metadata or kv_bytes changed in the round trip")
	}
}

func TestAuth(t *testing.T) {
	addr, _ := start(t, Config{Password: "s3cret"})
	ctx := context.Background()
	anon := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2})
	defer anon.Close()
	if err := anon.Get(ctx, "k").Err(); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Fatalf("unauthenticated GET: %v", err)
	}
	wrong := redis.NewClient(&redis.Options{Addr: addr, Password: "nope", Protocol: 2})
	defer wrong.Close()
	if err := wrong.Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Fatalf("wrong password: %v", err)
	}
	ok := redis.NewClient(&redis.Options{Addr: addr, Password: "s3cret"})
	defer ok.Close()
	if err := ok.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
}

// TestBadInput: malformed frames get a protocol error and a closed
// connection; an oversized argument is refused from its length prefix.
func TestBadInput(t *testing.T) {
	addr, mem := start(t, Config{Limits: Limits{MaxArgBytes: 1 << 20}})
	tests := []struct {
		name, in string
	}{
		{"bad array length", "*x\r\n"},
		{"missing dollar", "*1\r\n+PING\r\n"},
		{"oversized bulk", "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$999999999\r\n"},
		{"bulk without CRLF", "*2\r\n$3\r\nGET\r\n$1\r\nkXX"},
		{"truncated", "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$10\r\nabc"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_, _ = io.WriteString(conn, tt.in)
			if tt.name == "truncated" || tt.name == "bulk without CRLF" {
				_ = conn.(*net.TCPConn).CloseWrite()
			}
			_ = conn.SetReadDeadline(time.Now().Add(3 * time.Second))
			reply, _ := io.ReadAll(conn)
			if !bytes.HasPrefix(reply, []byte("-ERR Protocol error")) {
				t.Fatalf("reply %q, want a protocol error then a close", reply)
			}
		})
	}
	if mem.Contains("k") {
		t.Fatal("a malformed SET stored a value")
	}
}

func TestRedisCLIAndBenchmark(t *testing.T) {
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Fatal("redis-cli not on PATH: run `make tools` (Debian's redis-tools)")
	}
	bench, err := exec.LookPath("redis-benchmark")
	if err != nil {
		t.Fatal("redis-benchmark not on PATH: run `make tools` (Debian's redis-tools)")
	}
	addr, _ := start(t, Config{})
	host, port, _ := net.SplitHostPort(addr)
	run := func(bin string, args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, bin, append([]string{"-h", host, "-p", port}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %v: %v\n%s", bin, args, err, out)
		}
		return string(out)
	}
	if out := run(cli, "SET", "greeting", "hello"); strings.TrimSpace(out) != "OK" {
		t.Fatalf("redis-cli SET: %q", out)
	}
	if out := run(cli, "GET", "greeting"); strings.TrimSpace(out) != "hello" {
		t.Fatalf("redis-cli GET: %q", out)
	}
	if out := run(cli, "EXISTS", "greeting", "nope"); strings.TrimSpace(out) != "1" {
		t.Fatalf("redis-cli EXISTS: %q", out)
	}
	out := run(bench, "-t", "set,get", "-n", "2000", "-c", "4", "-d", "4096", "-q")
	for _, op := range []string{"SET", "GET"} {
		// -q redraws a progress line with \r; the result is the last draw.
		line := ""
		for l := range strings.FieldsFuncSeq(out, func(r rune) bool { return r == '\n' || r == '\r' }) {
			if l = strings.TrimSpace(l); strings.HasPrefix(l, op+":") && strings.Contains(l, "requests per second") {
				line = l
			}
		}
		fields := strings.Fields(line)
		if len(fields) < 2 {
			t.Fatalf("redis-benchmark printed no %s line:\n%s", op, out)
		}
		if rps, err := strconv.ParseFloat(fields[1], 64); err != nil || rps <= 0 {
			t.Fatalf("redis-benchmark %s: %q", op, line)
		}
	}
}

// FuzzReader: arbitrary bytes give commands, io.EOF or protocol errors;
// never a panic, never an argument over the limit.
func FuzzReader(f *testing.F) {
	for _, s := range []string{"*1\r\n$4\r\nPING\r\n", "PING\r\n", "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n", "*-1\r\n", "\r\n\r\n", "*2\r\n$3\r\nGET\r\n$-1\r\n", ""} {
		f.Add([]byte(s))
	}
	// What LMCache's valkey:// connector sends through valkey-glide (see
	// TestValkeyConnectorSequence), and malformed variants.
	for _, cmd := range [][]string{
		{"HELLO", "3", "AUTH", "default", "tok"},
		{"HELLO", "3", "AUTH", "default", "tok", "SETNAME", "w"},
		{"CLIENT", "SETINFO", "LIB-NAME", "GlidePy"},
		{"INFO", "REPLICATION"},
		{"MGET", "k:metadata", "k:kv_bytes"},
		{"MSET", "k:kv_bytes", "v", "k:metadata", "m"},
	} {
		f.Add(encodeCommand(cmd...))
	}
	f.Add(append(encodeCommand("SET", "k:kv_bytes", "v"), encodeCommand("SET", "k:metadata", "m")...))
	f.Add([]byte("HELLO 3 AUTH default tok\r\n"))
	f.Add([]byte("*5\r\n$5\r\nHELLO\r\n$1\r\n3\r\n$4\r\nAUTH\r\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		rd := NewReader(bufio.NewReader(bytes.NewReader(in)), Limits{MaxArgs: 16, MaxArgBytes: 1 << 10, MaxInline: 1 << 10})
		for range 32 {
			args, err := rd.Next()
			if err != nil {
				if !errors.Is(err, io.EOF) && !errors.Is(err, ErrProtocol) {
					t.Fatalf("unexpected error kind: %v", err)
				}
				return
			}
			if len(args) == 0 || len(args) > 16 {
				t.Fatalf("%d args", len(args))
			}
			for _, a := range args {
				if len(a) > 1<<10 {
					t.Fatalf("argument of %d bytes", len(a))
				}
			}
		}
	})
}
