package lmcache_test

import (
	"context"
	"encoding/binary"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/warmpath/warmpath/libs/blockhash"
	"github.com/warmpath/warmpath/libs/testredis"
	"github.com/warmpath/warmpath/libs/testwait"
	"github.com/warmpath/warmpath/tools/vllmsim/l2remote"
	"github.com/warmpath/warmpath/tools/vllmsim/lmcache"
)

const (
	chunk         = 4
	bytesPerToken = 1024 // a chunk is 4 KiB; scaled by 4, 1 KiB on the wire
	scale         = 4
)

func prompt(seed, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(seed*1_000_000 + i)
	}
	return out
}

// worker is one simulated LMCache: an L1 of l1Chunks chunks and the L2 at url.
func worker(t *testing.T, url string, l1Chunks int) *lmcache.Tiered {
	t.Helper()
	h, err := blockhash.New("7") // workers sharing an L2 share PYTHONHASHSEED
	if err != nil {
		t.Fatal(err)
	}
	l1, err := lmcache.New(lmcache.Config{ChunkSize: chunk, MaxBytes: int64(l1Chunks * chunk * bytesPerToken), BytesPerToken: bytesPerToken}, h)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := l2remote.Open(url, time.Second, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	tr, err := lmcache.NewTiered(t.Context(), l1, lmcache.RemoteConfig{
		Remote: cl, KeyPrefix: "m@1@0@", KeySuffix: "@bfloat16", Scale: scale,
		NetworkSeconds: func(tokens int) float64 { return float64(tokens) * 1e-3 },
		Backoff:        time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.Close)
	return tr
}

// waitWrites waits for the background writer to have written n chunks.
func waitWrites(t *testing.T, tr *lmcache.Tiered, n int64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for tr.RemoteCounters().WriteRequests < n {
		if time.Now().After(deadline) {
			t.Fatalf("writer wrote %+v, want %d chunks", tr.RemoteCounters(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestTwoWorkersShareKVThroughRedis(t *testing.T) {
	url := testredis.Start(t)
	a, b := worker(t, url, 16), worker(t, url, 16)
	p := prompt(1, 3*chunk+2) // three whole chunks; the partial one is never stored

	a.Store(p, nil)
	waitWrites(t, a, 3)
	if got := a.RemoteCounters(); got.WriteBytes != 3*int64(a.ValueBytes()) || a.ValueBytes() != chunk*bytesPerToken/scale {
		t.Fatalf("wrote %+v with %d-byte values, want 3 values of %d bytes", got, a.ValueBytes(), chunk*bytesPerToken/scale)
	}

	hit := b.Lookup(p, nil)
	if hit.CPU != 0 || hit.Remote != 3*chunk {
		t.Fatalf("b's lookup = %+v, want the 3 chunks from L2 only", hit)
	}
	end, secs := b.FetchRemote(p, nil, 0, len(p)-1)
	if end != 3*chunk {
		t.Fatalf("fetched to %d, want %d", end, 3*chunk)
	}
	if want := float64(3*chunk) * 1e-3; secs < want {
		t.Fatalf("charged %vs, want at least the modelled %vs", secs, want)
	}
	if got := b.RemoteCounters(); got.ReadRequests != 3 || got.ReadBytes != 3*int64(b.ValueBytes()) || got.Corrupt != 0 {
		t.Fatalf("b's remote counters %+v, want 3 clean reads", got)
	}
	// Fetched chunks were promoted into b's L1, and are not written back.
	if hit := b.Lookup(p, nil); hit.CPU != 3*chunk || hit.Remote != 0 {
		t.Fatalf("after the fetch b's lookup = %+v, want 3 chunks in L1", hit)
	}
	b.Store(p, nil)
	// Then a chunk b must write: the one writer takes puts in order, so once
	// that chunk is in L2 and counted, anything queued before it was written
	// too, and would be counted.
	marker := prompt(9, chunk)
	b.Store(marker, nil)
	c := worker(t, url, 16)
	testwait.For(t, 5*time.Second, "b's write of a new chunk", func() bool {
		return b.RemoteCounters().WriteRequests >= 1 && c.Lookup(marker, nil).Remote == chunk
	})
	if got := b.RemoteCounters().WriteRequests; got != 1 {
		t.Fatalf("b wrote %d chunks, want only the new one: it wrote chunks it had fetched", got)
	}

	// A different prompt sharing one chunk: L2 answers for the shared one only.
	q := append(prompt(1, chunk), prompt(2, 2*chunk)...)
	if hit := worker(t, url, 16).Lookup(q, nil); hit.Remote != chunk {
		t.Fatalf("lookup of a prompt sharing one chunk = %+v, want 1 chunk", hit)
	}
}

func TestRedisLayoutIsLMCaches(t *testing.T) {
	url := testredis.Start(t)
	w := worker(t, url, 16)
	p := prompt(3, chunk)
	w.Store(p, nil)
	waitWrites(t, w, 1)

	opts, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	rc := redis.NewClient(opts)
	defer rc.Close()
	ctx := t.Context()
	keys, err := rc.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 2 {
		t.Fatalf("keys %q, want <key>kv_bytes and <key>metadata", keys)
	}
	var base string
	for _, k := range keys {
		if s, ok := strings.CutSuffix(k, "metadata"); ok {
			base = s
		}
	}
	if !strings.HasPrefix(base, "m@1@0@") || !strings.HasSuffix(base, "@bfloat16") || len(base) != len("m@1@0@")+64+len("@bfloat16") {
		t.Fatalf("key %q is not model@world_size@worker_id@<hash hex>@dtype", base)
	}
	md, err := rc.Get(ctx, base+"metadata").Bytes()
	if err != nil {
		t.Fatal(err)
	}
	if len(md) != 28 || binary.LittleEndian.Uint32(md) != uint32(w.ValueBytes()) {
		t.Fatalf("metadata %x, want 7 little-endian int32s starting with the length %d", md, w.ValueBytes())
	}

	// Bytes gone under their metadata: a miss, and the metadata is dropped,
	// as LMCache's connector does.
	if err := rc.Del(ctx, base+"kv_bytes").Err(); err != nil {
		t.Fatal(err)
	}
	if end, _ := worker(t, url, 16).FetchRemote(p, nil, 0, chunk-1); end != 0 {
		t.Fatalf("fetch with the bytes deleted reached %d, want a miss", end)
	}
	if n, err := rc.Exists(ctx, base+"metadata").Result(); err != nil || n != 0 {
		t.Fatalf("orphaned metadata still there (exists=%d, err=%v)", n, err)
	}
}

func TestCorruptValueIsAMiss(t *testing.T) {
	url := testredis.Start(t)
	a, b := worker(t, url, 16), worker(t, url, 16)
	p := prompt(4, 2*chunk)
	a.Store(p, nil)
	waitWrites(t, a, 2)

	opts, _ := redis.ParseURL(url)
	rc := redis.NewClient(opts)
	defer rc.Close()
	keys, err := rc.Keys(t.Context(), "*kv_bytes").Result()
	if err != nil || len(keys) != 2 {
		t.Fatalf("keys %q, %v", keys, err)
	}
	// Flip one byte of the second chunk's value.
	second := b.Key(hashes(t, p)[1]) + "kv_bytes"
	v, err := rc.Get(t.Context(), second).Bytes()
	if err != nil {
		t.Fatal(err)
	}
	v[len(v)/2] ^= 0xff
	if err := rc.Set(t.Context(), second, v, 0).Err(); err != nil {
		t.Fatal(err)
	}
	end, _ := b.FetchRemote(p, nil, 0, len(p)-1)
	if end != chunk {
		t.Fatalf("fetched to %d, want to stop before the corrupt chunk at %d", end, chunk)
	}
	if got := b.RemoteCounters().Corrupt; got != 1 {
		t.Fatalf("corrupt = %d, want 1", got)
	}
}

func hashes(t *testing.T, p []uint32) []blockhash.Hash {
	t.Helper()
	h, err := blockhash.New("7")
	if err != nil {
		t.Fatal(err)
	}
	return h.Chain(p, chunk, nil)
}

func TestDeadRemoteIsAMissWithBackoff(t *testing.T) {
	var lc net.ListenConfig
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens there now

	for _, url := range []string{"lm://" + addr, "redis://" + addr} {
		t.Run(strings.SplitN(url, ":", 2)[0], func(t *testing.T) {
			w := worker(t, url, 16)
			p := prompt(5, 2*chunk)
			for range 3 {
				if hit := w.Lookup(p, nil); hit.CPU != 0 || hit.Remote != 0 {
					t.Fatalf("lookup with a dead L2 = %+v, want a miss", hit)
				}
			}
			// One failure, then the backoff skips the remote entirely.
			if got := w.RemoteCounters().Errors; got != 1 {
				t.Fatalf("errors = %d after 3 lookups, want 1 (the backoff)", got)
			}
			if end, secs := w.FetchRemote(p, nil, 0, len(p)-1); end != 0 || secs != 0 {
				t.Fatalf("fetch during the backoff = %d, %v; want nothing", end, secs)
			}
		})
	}
}
