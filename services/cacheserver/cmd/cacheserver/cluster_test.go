package main

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/warmpath/warmpath/libs/lmproto"
	"github.com/warmpath/warmpath/libs/testnet"
	"github.com/warmpath/warmpath/services/cacheserver/internal/cluster"
	"github.com/warmpath/warmpath/services/cacheserver/internal/store"
)

// TestRESPThroughCluster: two nodes; a value PUT over lm:// on A, under a
// key only A owns, is read over RESP on B (which forwards to A), and RESP
// writes and deletes on B reach A. RESP used to serve B's store alone.
func TestRESPThroughCluster(t *testing.T) {
	peerA, peerB := testnet.FreeAddr(t), testnet.FreeAddr(t)
	peers := peerA + "," + peerB
	a := startServer(t, nil, "--peer-listen", peerA, "--peers", peers)
	b := startServer(t, nil, "--peer-listen", peerB, "--peers", peers)

	// The same rendezvous hashing the nodes use names keys only A owns.
	view := cluster.New(cluster.Config{Self: peerA}, store.NewMemory(1<<20, store.Options{}), prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x"}, []string{"op", "result"}))
	view.SetPeers([]string{peerA, peerB})
	ownedByA := func(prefix string) string {
		for i := 0; ; i++ {
			if k := fmt.Sprintf("%s-%d", prefix, i); view.Owners(k)[0] == peerA {
				return k
			}
		}
	}
	ctx := t.Context()
	rdbB := redis.NewClient(&redis.Options{Addr: b.resp, Protocol: 2, MaxRetries: -1})
	defer rdbB.Close()
	rdbA := redis.NewClient(&redis.Options{Addr: a.resp, Protocol: 2, MaxRetries: -1})
	defer rdbA.Close()

	key := ownedByA("lm")
	val := bytes.Repeat([]byte{0xC3}, 1<<20)
	lmA := lmproto.Dial(a.lm, 2*time.Second, 0)
	defer lmA.Close()
	if err := lmA.Put(ctx, key, lmproto.Meta{Dtype: 3}, val); err != nil {
		t.Fatal(err)
	}
	// An lm:// PUT has no reply: poll until it is readable.
	var got []byte
	for deadline := time.Now().Add(5 * time.Second); ; {
		var err error
		if got, err = rdbB.Get(ctx, key).Bytes(); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !bytes.Equal(got, val) {
		t.Fatalf("RESP GET on B of a key PUT over lm:// on A: %d bytes, want %d", len(got), len(val))
	}
	if n, err := rdbB.Exists(ctx, key).Result(); n != 1 || err != nil {
		t.Fatalf("EXISTS on B: %d, %v", n, err)
	}

	key2 := ownedByA("resp")
	if err := rdbB.Set(ctx, key2, "from-b", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if v, err := rdbA.Get(ctx, key2).Result(); v != "from-b" || err != nil {
		t.Fatalf("RESP SET on B, GET on A: %q, %v", v, err)
	}
	if vals, err := rdbB.MGet(ctx, key, key2, "absent").Result(); err != nil || len(vals) != 3 || vals[1] != "from-b" || vals[2] != nil {
		t.Fatalf("MGET on B: %v, %v", vals, err)
	}
	if n, err := rdbB.Del(ctx, key2).Result(); n != 1 || err != nil {
		t.Fatalf("DEL on B: %d, %v", n, err)
	}
	if err := rdbA.Get(ctx, key2).Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET on A after DEL on B: %v, want nil", err)
	}
	// Forwards carry no expiry: refused rather than silently dropped.
	if err := rdbB.Set(ctx, key2, "v", time.Minute).Err(); err == nil {
		t.Fatal("SET EX in cluster mode succeeded; the owner would not expire it")
	}
}
