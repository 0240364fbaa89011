package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/warmpath/warmpath/libs/kvevents"
	"github.com/warmpath/warmpath/libs/lmproto"
	"github.com/warmpath/warmpath/libs/testnet"
	"github.com/warmpath/warmpath/services/cacheserver/internal/cluster"
	"github.com/warmpath/warmpath/services/cacheserver/internal/store"
)

// hashSet is what a subscriber knows a model's L2 holds: 64-hex chunk hashes.
type hashSet map[string]bool

// chunk is one chunk written in the audit: its data key and the key's
// chunk hash as 64 hex digits.
type chunk struct {
	model, dataKey, metaKey, hash string
	proto                         string // lm, redis, valkey
}

// TestKVEventsAudit runs the real server with KV events on and checks that
// a subscriber replaying the stream (on top of a snapshot, as the router
// will) ends with exactly the chunks the store holds, through stores over
// lm:// and RESP (both connector suffix styles), overwrites, deletes and
// evictions, with and without the disk tier; and that the snapshot
// endpoint agrees.
func TestKVEventsAudit(t *testing.T) {
	tests := []struct {
		name string
		args []string
	}{
		{"memory", []string{"--memory-capacity-bytes", "524288"}},
		{"memory and disk", []string{"--memory-capacity-bytes", "524288", "--disk-dir", "", "--disk-capacity-bytes", "409600"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := slices.Clone(tt.args)
			for i, a := range args {
				if a == "--disk-dir" {
					args[i+1] = t.TempDir()
				}
			}
			args = append(args, "--kv-events-endpoint", "tcp://*:0")
			audit(t, startServer(t, nil, args...))
		})
	}
}

func audit(t *testing.T, p *proc) {
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	_, port, err := net.SplitHostPort(p.kvEvents)
	if err != nil {
		t.Fatalf("kv_events address %q: %v", p.kvEvents, err)
	}
	sub := zmq4.NewSub(ctx, zmq4.WithLogger(log.New(io.Discard, "", 0)))
	defer sub.Close()
	if err := sub.SetOption(zmq4.OptionSubscribe, "l2@"); err != nil {
		t.Fatal(err)
	}
	if err := sub.Dial("tcp://127.0.0.1:" + port); err != nil {
		t.Fatalf("dial kv events: %v", err)
	}
	msgs := make(chan kvevents.Message, 1<<16)
	go func() {
		for {
			m, err := sub.Recv()
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				continue // a dropped connection; zmq4 redials
			}
			pm, err := kvevents.ParseMessage(m.Frames)
			if err != nil {
				t.Errorf("bad message: %v", err)
				return
			}
			msgs <- pm
		}
	}()

	rdb := redis.NewClient(&redis.Options{Addr: p.resp, Protocol: 2, MaxRetries: -1})
	defer rdb.Close()
	lm := lmproto.Dial(p.lm, 2*time.Second, 0)
	defer lm.Close()

	// The subscription is in place once a probe's event comes back: only
	// then can nothing written later be lost to ZMQ's slow joiner.
	var lastSeq uint64
probe:
	for i := 0; ; i++ {
		if err := rdb.Set(ctx, fmt.Sprintf("probe@1@0@%x@x", i+1), "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
		select {
		case m := <-msgs:
			lastSeq = m.Seq
			break probe
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			t.Fatal("no event for the probe keys")
		}
	}

	models := []string{"m1", "org/m2"}
	known := map[string]hashSet{}
	snapSeq := map[string]int64{}
	for _, m := range models {
		snapSeq[m], known[m] = snapshot(t, ctx, p, m)
	}

	rng := rand.New(rand.NewPCG(1, 2))
	val := bytes.Repeat([]byte{0x5A}, 4096)
	var chunks []chunk
	newChunk := func(i int, proto string) chunk {
		model := models[i%len(models)]
		var h [32]byte
		// Some hashes have leading zero bytes, written short as an int's
		// hex would be: they must name the same chunk as the long form.
		start := 0
		if i%3 == 0 {
			start = 24
		}
		for j := start; j < 32; j += 8 {
			binary.BigEndian.PutUint64(h[j:], rng.Uint64()|1<<63)
		}
		long := hex.EncodeToString(h[:])
		written := long
		if start > 0 {
			written = strings.TrimLeft(long, "0")
		}
		base := fmt.Sprintf("%s@1@%d@%s@bfloat16", model, i%2, written)
		c := chunk{model: model, hash: long, proto: proto}
		switch proto {
		case "lm":
			c.dataKey = base
		case "redis":
			c.dataKey, c.metaKey = base+"kv_bytes", base+"metadata"
		case "valkey":
			c.dataKey, c.metaKey = base+":kv_bytes", base+":metadata"
		}
		return c
	}
	put := func(c chunk) {
		t.Helper()
		if c.proto == "lm" {
			if err := lm.Put(ctx, c.dataKey, lmproto.Meta{Dtype: 3, Length: int32(len(val))}, val); err != nil {
				t.Fatalf("lm put: %v", err)
			}
			return
		}
		if err := rdb.Set(ctx, c.dataKey, val, 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", c.dataKey, err)
		}
		if err := rdb.Set(ctx, c.metaKey, make([]byte, 28), 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", c.metaKey, err)
		}
	}
	protos := []string{"lm", "redis", "valkey"}
	for i := range 240 {
		c := newChunk(i, protos[i%3])
		chunks = append(chunks, c)
		put(c)
		if i%40 == 39 {
			// The same chunk from another connector (same model, hash
			// and worker): one hash, two keys.
			twin := c
			twin.proto = "redis"
			base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(c.dataKey, "kv_bytes"), ":"), "kv_bytes")
			twin.dataKey, twin.metaKey = base+"kv_bytes", base+"metadata"
			if c.proto == "redis" {
				twin.proto = "lm"
				twin.dataKey, twin.metaKey = base, ""
			}
			chunks = append(chunks, twin)
			put(twin)
		}
	}
	// Keys that are not LMCache's make no event.
	for i := range 5 {
		if err := rdb.Set(ctx, fmt.Sprintf("not-a-chunk-%d", i), "x", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// Overwrites, of recent keys (in memory) and old ones (evicted or on disk).
	for i := 0; i < len(chunks); i += 7 {
		put(chunks[i])
	}
	// Deletes, over RESP (both keys, as LMCache's connector would) and lm://.
	for i := 3; i < len(chunks); i += 11 {
		c := chunks[i]
		if c.proto == "lm" {
			if _, err := lm.Delete(ctx, c.dataKey); err != nil {
				t.Fatalf("lm delete: %v", err)
			}
			continue
		}
		if err := rdb.Del(ctx, c.dataKey, c.metaKey).Err(); err != nil {
			t.Fatalf("DEL: %v", err)
		}
	}
	// And a last round of writes, evicting more.
	for i := 240; i < 300; i++ {
		c := newChunk(i, protos[i%3])
		chunks = append(chunks, c)
		put(c)
	}

	// Apply the stream until it and the snapshot agree with the store.
	for {
		drain := true
		for drain {
			select {
			case m := <-msgs:
				if m.Seq != lastSeq+1 {
					t.Fatalf("seq %d after %d: a gap", m.Seq, lastSeq)
				}
				lastSeq = m.Seq
				apply(t, ctx, p, m, known, snapSeq)
			default:
				drain = false
			}
		}
		want := storeHolds(t, ctx, rdb, chunks)
		agree := true
		for _, m := range models {
			_, snap := snapshot(t, ctx, p, m)
			if !maps.Equal(known[m], want[m]) || !maps.Equal(snap, want[m]) {
				agree = false
			}
		}
		if agree {
			break
		}
		select {
		case <-ctx.Done():
			for _, m := range models {
				_, snap := snapshot(t, ctx, p, m)
				t.Errorf("%s: stream has %d chunks, snapshot %d, store %d; stream-only %v, store-only %v", m,
					len(known[m]), len(snap), len(want[m]), diff(known[m], want[m]), diff(want[m], known[m]))
			}
			t.FailNow()
		case <-time.After(50 * time.Millisecond):
		}
	}
	total := 0
	for _, m := range models {
		total += len(known[m])
	}
	if total == 0 || total == len(chunks) {
		t.Errorf("store holds %d of %d chunks: the audit wants some, and some evicted", total, len(chunks))
	}
	t.Logf("store holds %d of %d chunks after %d batches", total, len(chunks), lastSeq+1)
	text := scrape(t, ctx, p)
	for _, name := range []string{"warmpath_cache_kv_events_published_total", "warmpath_cache_kv_events_unparsed_keys_total"} {
		if !strings.Contains(text, "\n"+name+" ") || strings.Contains(text, "\n"+name+" 0\n") {
			t.Errorf("%s missing or zero", name)
		}
	}
	if !strings.Contains(text, "\nwarmpath_cache_kv_events_dropped_total 0\n") {
		t.Errorf("events dropped: the queue should hold this load")
	}
	if evictions := strings.Contains(text, `warmpath_cache_evictions_total{tier="memory"} 0`); evictions {
		t.Errorf("no memory evictions: the audit wants some")
	}
}

// apply updates known from one message, refetching the model's snapshot
// after an AllBlocksCleared; batches already in a snapshot are skipped.
func apply(t *testing.T, ctx context.Context, p *proc, m kvevents.Message, known map[string]hashSet, snapSeq map[string]int64) {
	t.Helper()
	model, ok := strings.CutPrefix(m.Topic, "l2@")
	if !ok {
		t.Fatalf("topic %q does not name a model", m.Topic)
	}
	b, err := kvevents.DecodeBatch(m.Payload)
	if err != nil {
		t.Fatalf("seq %d: %v", m.Seq, err)
	}
	set, tracked := known[model]
	if !tracked || int64(m.Seq) <= snapSeq[model] {
		return
	}
	for _, ev := range b.Events {
		switch ev := ev.(type) {
		case kvevents.BlockStored:
			if len(ev.BlockHashes) != 1 || ev.Medium != "L2" || ev.BlockSize != 0 || ev.TokenIDs != nil || ev.ParentBlockHash != nil {
				t.Fatalf("seq %d: unexpected BlockStored %+v", m.Seq, ev)
			}
			set[hashHex(t, ev.BlockHashes[0])] = true
		case kvevents.BlockRemoved:
			if len(ev.BlockHashes) != 1 || ev.Medium != "L2" {
				t.Fatalf("seq %d: unexpected BlockRemoved %+v", m.Seq, ev)
			}
			delete(set, hashHex(t, ev.BlockHashes[0]))
		case kvevents.AllBlocksCleared:
			snapSeq[model], known[model] = snapshot(t, ctx, p, model)
			return
		}
	}
}

func hashHex(t *testing.T, h kvevents.BlockHash) string {
	t.Helper()
	if h.IsInt() || len(h.Bytes()) != 32 {
		t.Fatalf("hash %v: want 32 raw bytes", h)
	}
	return hex.EncodeToString(h.Bytes())
}

// storeHolds asks the store (EXISTS, which neither promotes nor evicts)
// which chunks it holds, by model.
func storeHolds(t *testing.T, ctx context.Context, rdb *redis.Client, chunks []chunk) map[string]hashSet {
	t.Helper()
	pipe := rdb.Pipeline()
	cmds := make([]*redis.IntCmd, len(chunks))
	for i, c := range chunks {
		cmds[i] = pipe.Exists(ctx, c.dataKey)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		t.Fatalf("EXISTS: %v", err)
	}
	out := map[string]hashSet{"m1": {}, "org/m2": {}}
	for i, c := range chunks {
		if cmds[i].Val() == 1 {
			out[c.model][c.hash] = true
		}
	}
	return out
}

// snapshot fetches a model's snapshot.
func snapshot(t *testing.T, ctx context.Context, p *proc, model string) (int64, hashSet) {
	t.Helper()
	body := get(t, ctx, "http://"+p.httpA+"/v1/kv-events/snapshot?model="+url.QueryEscape(model))
	var snap struct {
		Seq    *int64   `json:"seq"`
		Hashes []string `json:"hashes"`
	}
	if err := json.Unmarshal(body, &snap); err != nil || snap.Seq == nil || snap.Hashes == nil {
		t.Fatalf("snapshot %q: %v: %s", model, err, body)
	}
	set := hashSet{}
	for _, h := range snap.Hashes {
		set[h] = true
	}
	return *snap.Seq, set
}

func scrape(t *testing.T, ctx context.Context, p *proc) string {
	t.Helper()
	return string(get(t, ctx, "http://"+p.httpA+"/metrics"))
}

func get(t *testing.T, ctx context.Context, u string) []byte {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v: %s", u, resp.StatusCode, err, body)
	}
	return body
}

func diff(a, b hashSet) []string {
	var out []string
	for h := range a {
		if !b[h] {
			out = append(out, h[:12])
		}
	}
	return out
}

// TestKVEventsCluster: in cluster mode each node publishes what its own
// store holds. Chunks written through A land on their owners, and each
// node's snapshot lists exactly the chunks it owns.
func TestKVEventsCluster(t *testing.T) {
	peerA, peerB := testnet.FreeAddr(t), testnet.FreeAddr(t)
	peers := peerA + "," + peerB
	events := []string{"--kv-events-endpoint", "tcp://*:0"}
	a := startServer(t, nil, append([]string{"--peer-listen", peerA, "--peers", peers}, events...)...)
	b := startServer(t, nil, append([]string{"--peer-listen", peerB, "--peers", peers}, events...)...)
	view := cluster.New(cluster.Config{Self: peerA}, store.NewMemory(1<<20, store.Options{}), prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x"}, []string{"op", "result"}))
	view.SetPeers([]string{peerA, peerB})

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	lm := lmproto.Dial(a.lm, 2*time.Second, 0)
	defer lm.Close()
	want := map[string]hashSet{peerA: {}, peerB: {}}
	for i := range 40 {
		h := fmt.Sprintf("%064x", i+1)
		key := "m1@1@0@" + h + "@bfloat16"
		if err := lm.Put(ctx, key, lmproto.Meta{Dtype: 3}, []byte("v")); err != nil {
			t.Fatal(err)
		}
		want[view.Owners(key)[0]][h] = true
	}
	if len(want[peerA]) == 0 || len(want[peerB]) == 0 {
		t.Fatalf("owners: A %d, B %d chunks; the test wants both", len(want[peerA]), len(want[peerB]))
	}
	for {
		_, gotA := snapshot(t, ctx, a, "m1")
		_, gotB := snapshot(t, ctx, b, "m1")
		if maps.Equal(gotA, want[peerA]) && maps.Equal(gotB, want[peerB]) {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("snapshots: A %d chunks, B %d; want A %d, B %d", len(gotA), len(gotB), len(want[peerA]), len(want[peerB]))
		case <-time.After(20 * time.Millisecond):
		}
	}
}
