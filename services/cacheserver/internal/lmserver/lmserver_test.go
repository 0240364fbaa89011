package lmserver

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/warmpath/warmpath/libs/lmproto"
	"github.com/warmpath/warmpath/services/cacheserver/internal/cluster"
	"github.com/warmpath/warmpath/services/cacheserver/internal/metrics"
	"github.com/warmpath/warmpath/services/cacheserver/internal/store"
)

type fixture struct {
	addr string
	mem  *store.Memory
	m    *metrics.Metrics
}

func start(t *testing.T) fixture {
	t.Helper()
	return startWith(t, store.Options{})
}

func startWith(t *testing.T, opts store.Options) fixture {
	t.Helper()
	mem := store.NewMemory(256<<20, opts)
	m := metrics.New(prometheus.NewRegistry(), mem)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- New(Config{MaxValueBytes: 8 << 20, IOTimeout: time.Second}, cluster.Local{Mem: mem}, m, slog.New(slog.DiscardHandler)).Serve(ctx, ln)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return fixture{addr: ln.Addr().String(), mem: mem, m: m}
}

func TestLMCacheClientRoundTrip(t *testing.T) {
	f := start(t)
	c := lmproto.Dial(f.addr, 2*time.Second, 0)
	defer c.Close()
	ctx := context.Background()
	val := bytes.Repeat([]byte("kv"), 1<<20) // 2 MiB, as a 256-token chunk of a small model
	meta := lmproto.Meta{Fmt: 1, Dtype: 3, Location: 1, Shape: [4]int32{2, 32, 256, 1024}}
	key := "Llama-3.1-8B@1@0@deadbeef@bfloat16"
	if err := c.Put(ctx, key, meta, val); err != nil {
		t.Fatal(err)
	}
	got, gm, err := c.Get(ctx, key)
	if err != nil || !bytes.Equal(got, val) {
		t.Fatalf("get: %d bytes, %v", len(got), err)
	}
	if gm.Shape != meta.Shape || gm.Dtype != meta.Dtype || gm.Fmt != meta.Fmt || gm.Length != int32(len(val)) {
		t.Fatalf("metadata back %+v, put %+v", gm, meta)
	}
	if ok, err := c.Exist(ctx, key); !ok || err != nil {
		t.Fatalf("exist: %v %v", ok, err)
	}
	if _, _, err := c.Get(ctx, "absent"); !errors.Is(err, lmproto.ErrMiss) {
		t.Fatalf("absent: %v", err)
	}
	if err := c.Health(ctx); err != nil {
		t.Fatal(err)
	}
	if v := testutil.ToFloat64(f.m.Requests.WithLabelValues("lm", "get", "hit")); v != 1 {
		t.Errorf("get hits = %v", v)
	}
	if v := testutil.ToFloat64(f.m.BytesOut.WithLabelValues("lm")); v != float64(len(val)) {
		t.Errorf("bytes out = %v", v)
	}
}

// TestBadInput: a malformed frame closes the connection and stores
// nothing; other connections are unaffected.
func TestBadInput(t *testing.T) {
	hdr := func(cmd, length int32, key string) []byte {
		b, err := lmproto.AppendRequest(nil, &lmproto.RequestHeader{Command: cmd, Meta: lmproto.Meta{Length: length}, Key: key})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	tests := []struct {
		name string
		in   []byte
		key  string
	}{
		{"garbage", []byte(strings.Repeat("GET / HTTP/1.1\r\n", 20)), ""},
		{"unknown command", hdr(9, 0, "k1"), "k1"},
		{"value over the limit", hdr(lmproto.CmdPut, 16<<20, "k2"), "k2"},
		{"truncated PUT", append(hdr(lmproto.CmdPut, 1000, "k3"), make([]byte, 10)...), "k3"},
	}
	f := start(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", f.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := conn.Write(tt.in); err != nil {
				t.Fatal(err)
			}
			if tt.name == "truncated PUT" {
				_ = conn.(*net.TCPConn).CloseWrite()
			}
			_ = conn.SetReadDeadline(time.Now().Add(3 * time.Second))
			if n, err := conn.Read(make([]byte, 64)); n != 0 || !errors.Is(err, io.EOF) {
				t.Fatalf("read %d bytes, err %v; want the server to close the connection", n, err)
			}
			if tt.key != "" && f.mem.Contains(tt.key) {
				t.Fatal("a malformed request stored an object")
			}
		})
	}
	if v := testutil.ToFloat64(f.m.Errors.WithLabelValues("lm", "malformed")); v < 3 {
		t.Errorf("protocol errors = %v, want ≥ 3", v)
	}
	c := lmproto.Dial(f.addr, time.Second, 0)
	defer c.Close()
	if err := c.Health(context.Background()); err != nil {
		t.Fatalf("server unhealthy after bad clients: %v", err)
	}
}

// TestHealthEmptyKey: a HEALTH request is answered 200 whatever its key,
// as the reference server answers it (lmcache/v1/server/__main__.py,
// LMCache e33d0c81d3c44ba339c5282fd3f1f116eaac3403), and the connection
// stays open for the next request.
func TestHealthEmptyKey(t *testing.T) {
	tests := []struct {
		name string
		key  byte // the byte the 150-byte key is filled with
	}{
		{"spaces", ' '},
		{"NULs", 0},
	}
	f := start(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := binary.LittleEndian.AppendUint32(nil, uint32(lmproto.CmdHealth))
			req = append(req, make([]byte, 8*4)...)
			req = append(req, bytes.Repeat([]byte{tt.key}, lmproto.KeySize)...)
			conn, err := net.Dial("tcp", f.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(3 * time.Second))
			for i := range 2 {
				if _, err := conn.Write(req); err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
				b := make([]byte, lmproto.ReplyHeaderSize)
				if _, err := io.ReadFull(conn, b); err != nil {
					t.Fatalf("reply %d: %v", i, err)
				}
				r, err := lmproto.ParseReply(b)
				if err != nil || r.Code != lmproto.CodeSuccess {
					t.Fatalf("reply %d: %+v, %v; want code 200", i, r, err)
				}
			}
		})
	}
}

// TestDefaultTTL: lm:// carries no TTL, so objects get the server's
// default; once it passes, GET and EXIST answer as for a missing key.
func TestDefaultTTL(t *testing.T) {
	var mu sync.Mutex
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return now
	}
	f := startWith(t, store.Options{DefaultTTL: time.Minute, Now: clock})
	c := lmproto.Dial(f.addr, 2*time.Second, 0)
	defer c.Close()
	ctx := context.Background()
	if err := c.Put(ctx, "k", lmproto.Meta{Dtype: 3}, []byte("kv")); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		advance time.Duration
		want    bool
	}{{0, true}, {59 * time.Second, true}, {time.Second, false}}
	for _, st := range steps {
		mu.Lock()
		now = now.Add(st.advance)
		mu.Unlock()
		ok, err := c.Exist(ctx, "k")
		if err != nil || ok != st.want {
			t.Fatalf("after %v: exist %v %v, want %v", st.advance, ok, err, st.want)
		}
		v, _, err := c.Get(ctx, "k")
		if hit := err == nil; hit != st.want || (hit && string(v) != "kv") || (!hit && !errors.Is(err, lmproto.ErrMiss)) {
			t.Fatalf("after %v: get %q %v, want hit %v", st.advance, v, err, st.want)
		}
	}
	if got := f.mem.Stats().Expired; got != 1 {
		t.Fatalf("expired %d, want 1", got)
	}
}

// TestPutValueIsReserved: a PUT's value is asked of Config.Reserve as its
// bytes arrive, in steps that add up to its size, and given back once
// stored.
func TestPutValueIsReserved(t *testing.T) {
	mem := store.NewMemory(256<<20, store.Options{})
	m := metrics.New(prometheus.NewRegistry(), mem)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	reserve := &countingReserver{}
	mu := &reserve.mu
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		_ = New(Config{MaxValueBytes: 8 << 20, Reserve: reserve}, cluster.Local{Mem: mem}, m, nil).Serve(ctx, ln)
	}()
	c := lmproto.Dial(ln.Addr().String(), 2*time.Second, 0)
	defer c.Close()
	tests := []struct {
		key  string
		size int
	}{{"small", 10}, {"large", 3 << 20}}
	for _, tt := range tests {
		mu.Lock()
		reserve.asked = 0
		mu.Unlock()
		if err := c.Put(ctx, tt.key, lmproto.Meta{}, make([]byte, tt.size)); err != nil {
			t.Fatal(err)
		}
		if _, _, err := c.Get(ctx, tt.key); err != nil { // served after the PUT: it was stored
			t.Fatalf("%s: %v", tt.key, err)
		}
		mu.Lock()
		total, h := reserve.asked, reserve.held
		mu.Unlock()
		if total != int64(tt.size) || h != 0 {
			t.Fatalf("%s: reserved %d in all (want %d), %d still held after the store", tt.key, total, tt.size, h)
		}
	}
}

// countingReserver counts what is asked of it and still held.
type countingReserver struct {
	mu          sync.Mutex
	asked, held int64
}

func (r *countingReserver) Reserve(_ context.Context, n int64) (func(), error) {
	return r.Grow(n), nil
}

func (r *countingReserver) Grow(n int64) func() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.asked += n
	r.held += n
	return func() { r.mu.Lock(); r.held -= n; r.mu.Unlock() }
}

// TestDelete: warmpath's DELETE (what cluster nodes forward RESP DEL with)
// answers 200 when the key was there, then 400.
func TestDelete(t *testing.T) {
	f := start(t)
	c := lmproto.Dial(f.addr, 2*time.Second, 0)
	defer c.Close()
	ctx := t.Context()
	if err := c.Put(ctx, "k", lmproto.Meta{}, []byte("v")); err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{true, false} {
		if ok, err := c.Delete(ctx, "k"); ok != want || err != nil {
			t.Fatalf("delete %d: %v, %v; want %v", i, ok, err, want)
		}
	}
	if f.mem.Contains("k") {
		t.Fatal("key still stored")
	}
}

// TestPutLargerThanReserveLimit: a value larger than the memory tier's
// reserve limit (a quarter of its capacity by default), which arrives in
// steps, is admitted once and grows as its bytes arrive, not made to wait
// for its own earlier steps to be given back (it waited out the I/O
// timeout and failed: 512 KiB LMCache chunks into a 1 MiB memory tier,
// whose limit is 256 KiB).
func TestPutLargerThanReserveLimit(t *testing.T) {
	mem := store.NewMemory(32<<20, store.Options{ReserveLimit: 256 << 10})
	m := metrics.New(prometheus.NewRegistry(), mem)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		_ = New(Config{MaxValueBytes: 8 << 20, Reserve: mem, IOTimeout: 2 * time.Second}, cluster.Local{Mem: mem}, m, nil).Serve(ctx, ln)
	}()
	c := lmproto.Dial(ln.Addr().String(), 5*time.Second, 0)
	defer c.Close()
	for _, size := range []int{300 << 10, 600 << 10, 900 << 10} {
		want := make([]byte, size)
		for i := range want {
			want[i] = byte(i * 7)
		}
		key := fmt.Sprintf("chunk-%d", size)
		if err := c.Put(ctx, key, lmproto.Meta{}, want); err != nil {
			t.Fatalf("PUT of %d bytes: %v", size, err)
		}
		got, _, err := c.Get(ctx, key)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("GET of the %d bytes: %d bytes, %v", size, len(got), err)
		}
	}
}
