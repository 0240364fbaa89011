package resp

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"math"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/warmpath/warmpath/libs/testcert"
	"github.com/warmpath/warmpath/libs/tlsconf"
	"github.com/warmpath/warmpath/services/cacheserver/internal/cluster"
	"github.com/warmpath/warmpath/services/cacheserver/internal/metrics"
	"github.com/warmpath/warmpath/services/cacheserver/internal/store"
	"github.com/warmpath/warmpath/services/cacheserver/internal/testclock"
)

func TestSetExpiry(t *testing.T) {
	now := time.Unix(1_800_000_000, 0).UnixNano()
	tests := []struct {
		name    string
		opts    string
		want    int64
		wantErr string
	}{
		{"none", "", 0, ""},
		{"EX", "EX 10", now + 10e9, ""},
		{"ex lower case", "ex 10", now + 10e9, ""},
		{"PX", "PX 1500", now + 1500e6, ""},
		{"EXAT", "EXAT 1900000000", 1_900_000_000e9, ""},
		{"PXAT", "PXAT 1900000000123", 1_900_000_000_123e6, ""},
		{"EXAT in the past", "EXAT 1", now, ""},
		{"zero", "EX 0", 0, "invalid expire time in 'set'"},
		{"negative", "PX -5", 0, "invalid expire time in 'set'"},
		{"overflow", "EX 9223372036854775807", 0, "invalid expire time in 'set'"},
		{"not a number", "EX ten", 0, "not an integer"},
		{"missing number", "EX", 0, "syntax error"},
		{"two expiries", "EX 1 PX 1000", 0, "syntax error"},
		{"unknown option", "FOREVER", 0, "syntax error"},
		{"NX refused", "NX", 0, "'NX' is not supported"},
		{"KEEPTTL refused", "KEEPTTL", 0, "'KEEPTTL' is not supported"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var opts [][]byte
			for f := range strings.FieldsSeq(tt.opts) {
				opts = append(opts, []byte(f))
			}
			got, err := setExpiry(opts, now)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got %d, %v; want an error containing %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %d, %v; want %d", got, err, tt.want)
			}
		})
	}
}

// FuzzSetExpiry: any options give an error or an expiry at or after now;
// never a panic, never the "no expiry" 0 when an option was accepted.
func FuzzSetExpiry(f *testing.F) {
	for _, s := range []string{"EX 10", "PX 1", "EXAT 1", "PXAT 99999999999999", "EX 9223372036854775807", "PX -1", "EX", "KEEPTTL", ""} {
		f.Add(s)
	}
	now := time.Unix(1_800_000_000, 0).UnixNano()
	f.Fuzz(func(t *testing.T, in string) {
		var opts [][]byte
		for f := range strings.FieldsSeq(in) {
			opts = append(opts, []byte(f))
		}
		at, err := setExpiry(opts, now)
		switch {
		case err != nil:
			if at != 0 || !strings.HasPrefix(err.Error(), "ERR ") {
				t.Fatalf("error %q with expiry %d", err, at)
			}
		case len(opts) == 0:
			if at != 0 {
				t.Fatalf("expiry %d without options", at)
			}
		case at < now:
			t.Fatalf("expiry %d before now %d", at, now)
		}
	})
}

func TestExpiresAtOverflow(t *testing.T) {
	tests := []struct {
		name   string
		n      int64
		unit   time.Duration
		abs    bool
		now    int64
		want   int64
		wantOK bool
	}{
		{"seconds overflow", math.MaxInt64 / 1_000_000_000 * 2, time.Second, false, 0, 0, false},
		{"sum overflow", math.MaxInt64 / 1_000_000_000, time.Second, false, 1e18, 0, false},
		{"negative clamps to now", -5, time.Second, false, 100, 100, true},
		{"negative overflow", math.MinInt64 / 1_000_000, time.Millisecond, false, -1e18, 0, false},
		{"absolute", 7, time.Millisecond, true, 1, 7e6, true},
	}
	for _, tt := range tests {
		got, ok := expiresAt(tt.n, tt.unit, tt.abs, tt.now)
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("%s: got %d %v, want %d %v", tt.name, got, ok, tt.want, tt.wantOK)
		}
	}
}

// TestTTLGoRedis: go-redis's expiry commands against the injected clock.
func TestTTLGoRedis(t *testing.T) {
	clock := testclock.New()
	addr, _ := startWith(t, Config{}, store.Options{DefaultTTL: time.Hour, Now: clock.Now}, nil)
	rdb := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2})
	defer rdb.Close()
	ctx := context.Background()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(rdb.Set(ctx, "ex", "v", 10*time.Second).Err())        // SET ex v EX 10
	must(rdb.Set(ctx, "px", "v", 1500*time.Millisecond).Err()) // SET px v PX 1500
	must(rdb.Set(ctx, "default", "v", 0).Err())
	must(rdb.Set(ctx, "forever", "v", 0).Err())
	if n, err := rdb.Persist(ctx, "forever").Result(); n != true || err != nil {
		t.Fatalf("PERSIST: %v %v", n, err)
	}
	tests := []struct {
		name string
		got  func() (time.Duration, error)
		want time.Duration
	}{
		{"TTL EX", rdb.TTL(ctx, "ex").Result, 10 * time.Second},
		{"PTTL PX", rdb.PTTL(ctx, "px").Result, 1500 * time.Millisecond},
		{"TTL default", rdb.TTL(ctx, "default").Result, time.Hour},
		{"TTL persisted", rdb.TTL(ctx, "forever").Result, -1},
		{"TTL missing", rdb.TTL(ctx, "absent").Result, -2},
		{"PTTL missing", rdb.PTTL(ctx, "absent").Result, -2},
	}
	for _, tt := range tests {
		if got, err := tt.got(); err != nil || got != tt.want {
			t.Errorf("%s: got %v, %v; want %v", tt.name, got, err, tt.want)
		}
	}
	clock.Advance(1600 * time.Millisecond)
	if _, err := rdb.Get(ctx, "px").Result(); !errors.Is(err, redis.Nil) {
		t.Fatalf("expired key: %v, want a miss", err)
	}
	if n, _ := rdb.Exists(ctx, "px", "ex").Result(); n != 1 {
		t.Fatalf("EXISTS counted %d keys, want 1 (px expired)", n)
	}
	// 8.4 s left: TTL rounds to the nearest second, as Redis does.
	if got, _ := rdb.TTL(ctx, "ex").Result(); got != 8*time.Second {
		t.Fatalf("TTL after 1.6 s: %v, want 8s", got)
	}
	if ok, err := rdb.Expire(ctx, "ex", time.Minute).Result(); !ok || err != nil {
		t.Fatalf("EXPIRE: %v %v", ok, err)
	}
	if ok, _ := rdb.Expire(ctx, "absent", time.Minute).Result(); ok {
		t.Fatal("EXPIRE of a missing key reported 1")
	}
	if ok, _ := rdb.PExpire(ctx, "default", -time.Millisecond).Result(); !ok {
		t.Fatal("PEXPIRE with a negative time did not report the deletion")
	}
	if n, _ := rdb.Exists(ctx, "default").Result(); n != 0 {
		t.Fatal("PEXPIRE with a negative time left the key")
	}
	clock.Advance(59 * time.Second)
	if got, _ := rdb.PTTL(ctx, "ex").Result(); got != time.Second {
		t.Fatalf("PTTL after EXPIRE 60 and 59 s: %v, want 1s", got)
	}
	if err := rdb.Do(ctx, "SET", "k", "v", "EX", "0").Err(); err == nil || !strings.Contains(err.Error(), "invalid expire time") {
		t.Fatalf("SET EX 0: %v", err)
	}
	errs := []struct {
		args []any
		want string
	}{
		{[]any{"EXPIRE", "ex", "soon"}, "not an integer"},
		{[]any{"EXPIRE", "ex"}, "wrong number of arguments for 'expire'"},
		{[]any{"EXPIRE", "ex", "10", "NX"}, "not supported"},
		{[]any{"TTL", "ex", "extra"}, "wrong number of arguments for 'ttl'"},
		{[]any{"PERSIST"}, "wrong number of arguments for 'persist'"},
		{[]any{"PEXPIRE", "ex", "9223372036854775807"}, "invalid expire time in 'pexpire'"},
	}
	for _, tt := range errs {
		if err := rdb.Do(ctx, tt.args...).Err(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: %v, want an error containing %q", tt.args, err, tt.want)
		}
	}
}

// redisCLI runs the real redis-cli against addr with extra flags first.
func redisCLI(t *testing.T, addr string, flags []string, args ...string) string {
	t.Helper()
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Fatal("redis-cli not on PATH: run `make tools` (Debian's redis-tools)")
	}
	host, port, _ := net.SplitHostPort(addr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	all := append(append([]string{"-h", host, "-p", port}, flags...), args...)
	out, err := exec.CommandContext(ctx, cli, all...).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli %v: %v\n%s", all, err, out)
	}
	return strings.TrimSpace(string(out))
}

func TestRedisCLIExpiry(t *testing.T) {
	clock := testclock.New()
	addr, _ := startWith(t, Config{}, store.Options{Now: clock.Now}, nil)
	steps := []struct {
		args    []string
		advance time.Duration
		want    string
	}{
		{[]string{"SET", "k", "v", "EX", "100"}, 0, "OK"},
		{[]string{"TTL", "k"}, 0, "100"},
		{[]string{"PTTL", "k"}, 40 * time.Second, "60000"},
		{[]string{"SET", "plain", "v"}, 0, "OK"},
		{[]string{"TTL", "plain"}, 0, "-1"},
		{[]string{"TTL", "absent"}, 0, "-2"},
		{[]string{"EXPIRE", "plain", "5"}, 0, "1"},
		{[]string{"GET", "plain"}, 5 * time.Second, ""},
		{[]string{"TTL", "plain"}, 0, "-2"},
		{[]string{"SET", "k", "v", "PX", "0"}, 0, "ERR invalid expire time in 'set' command"},
	}
	for _, st := range steps {
		clock.Advance(st.advance)
		if got := redisCLI(t, addr, nil, st.args...); got != st.want {
			t.Errorf("%v: %q, want %q", st.args, got, st.want)
		}
	}
}

// TestTLS: redis-cli --tls and go-redis over TLS, with and without client
// certificates.
func TestTLS(t *testing.T) {
	c := testcert.Write(t, "cacheserver")
	tests := []struct {
		name   string
		files  tlsconf.Files
		flags  []string
		client bool // go-redis presents the client certificate
	}{
		{"server TLS", tlsconf.Files{CertFile: c.Cert, KeyFile: c.Key}, []string{"--tls", "--cacert", c.CA}, false},
		{"mutual TLS", tlsconf.Files{CertFile: c.Cert, KeyFile: c.Key, ClientCAFile: c.CA},
			[]string{"--tls", "--cacert", c.CA, "--cert", c.ClientCert, "--key", c.ClientKey}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := tlsconf.Server(tt.files, 0, nil)
			if err != nil {
				t.Fatal(err)
			}
			addr, _ := startWith(t, Config{Password: "s3cret"}, store.Options{}, cfg)
			auth := append(tt.flags, "--no-auth-warning", "-a", "s3cret")
			if got := redisCLI(t, addr, auth, "SET", "k", "over tls", "EX", "60"); got != "OK" {
				t.Fatalf("redis-cli --tls SET: %q", got)
			}
			if got := redisCLI(t, addr, auth, "GET", "k"); got != "over tls" {
				t.Fatalf("redis-cli --tls GET: %q", got)
			}
			roots := x509.NewCertPool()
			pem, _ := os.ReadFile(c.CA)
			roots.AppendCertsFromPEM(pem)
			tc := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
			if tt.client {
				cert, err := tls.LoadX509KeyPair(c.ClientCert, c.ClientKey)
				if err != nil {
					t.Fatal(err)
				}
				tc.Certificates = []tls.Certificate{cert}
			}
			rdb := redis.NewClient(&redis.Options{Addr: addr, Password: "s3cret", TLSConfig: tc, Protocol: 2})
			defer rdb.Close()
			if got, err := rdb.Get(context.Background(), "k").Result(); got != "over tls" || err != nil {
				t.Fatalf("go-redis over TLS: %q %v", got, err)
			}
			// Plaintext to a TLS port: no RESP reply comes back.
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_, _ = conn.Write([]byte("PING\r\n"))
			_ = conn.SetReadDeadline(time.Now().Add(3 * time.Second))
			line, _ := bufio.NewReader(conn).ReadString('\n')
			if strings.HasPrefix(line, "+PONG") {
				t.Fatal("a plaintext client was served on the TLS port")
			}
		})
	}
	// mTLS without a client certificate: refused.
	cfg, err := tlsconf.Server(tlsconf.Files{CertFile: c.Cert, KeyFile: c.Key, ClientCAFile: c.CA}, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := startWith(t, Config{}, store.Options{}, cfg)
	host, port, _ := net.SplitHostPort(addr)
	out, err := exec.CommandContext(t.Context(), "redis-cli", "-h", host, "-p", port, "--tls", "--cacert", c.CA, "PING").CombinedOutput()
	if err == nil && bytes.Contains(out, []byte("PONG")) {
		t.Fatalf("mTLS without a client certificate was served: %s", out)
	}
}

// TestAuthFailuresCounted: NOAUTH and WRONGPASS count as auth failures.
func TestAuthFailuresCounted(t *testing.T) {
	mem := store.NewMemory(1<<20, store.Options{})
	m := metrics.New(prometheus.NewRegistry(), mem)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- New(Config{Password: "s3cret"}, cluster.Local{Mem: mem}, mem, m, nil).Serve(ctx, ln) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	// DisableIdentity: no CLIENT SETINFO, which would count as NOAUTH too.
	// go-redis opens with HELLO 2 (no password given): a NOAUTH, counted.
	rdb := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), Protocol: 2, DisableIdentity: true})
	defer rdb.Close()
	_ = rdb.Get(context.Background(), "k").Err()             // HELLO 2, then GET: two NOAUTH
	_ = rdb.Do(context.Background(), "AUTH", "wrong").Err()  // WRONGPASS
	_ = rdb.Do(context.Background(), "AUTH", "s3cret").Err() // ok
	if got := testutil.ToFloat64(m.AuthFailures.WithLabelValues("resp")); got != 3 {
		t.Fatalf("auth failures %v, want 3", got)
	}
}
