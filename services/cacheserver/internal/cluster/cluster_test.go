package cluster_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/warmpath/warmpath/libs/lmproto"
	"github.com/warmpath/warmpath/libs/testwait"
	"github.com/warmpath/warmpath/services/cacheserver/internal/cluster"
	"github.com/warmpath/warmpath/services/cacheserver/internal/lmserver"
	"github.com/warmpath/warmpath/services/cacheserver/internal/metrics"
	"github.com/warmpath/warmpath/services/cacheserver/internal/store"
	"github.com/warmpath/warmpath/services/cacheserver/internal/testclock"
)

// node is one in-process cache server: a client listener over the
// cluster, and a peer listener over its own store.
type node struct {
	client, peer string
	mem          *store.Memory
	cl           *cluster.Cluster
	m            *metrics.Metrics
	stop         context.CancelFunc
}

// halt stops the node and waits until its peer listener refuses
// connections.
func (nd *node) halt(t *testing.T) {
	t.Helper()
	nd.stop()
	testwait.For(t, 5*time.Second, "node "+nd.peer+" to stop listening", func() bool {
		c, err := net.DialTimeout("tcp", nd.peer, time.Second)
		if err == nil {
			_ = c.Close()
		}
		return err != nil
	})
}

func serve(t *testing.T, ctx context.Context, b lmserver.Backend, m *metrics.Metrics) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = lmserver.New(lmserver.Config{}, b, m, slog.New(slog.DiscardHandler)).Serve(ctx, ln) }()
	return ln.Addr().String()
}

func startCluster(t *testing.T, n, replicas int) []*node {
	t.Helper()
	nodes := make([]*node, n)
	var peers []string
	for i := range nodes {
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		mem := store.NewMemory(64<<20, store.Options{})
		m := metrics.New(prometheus.NewRegistry(), mem)
		nd := &node{mem: mem, m: m, stop: cancel}
		nd.peer = serve(t, ctx, cluster.Local{Mem: mem}, m)
		nd.cl = cluster.New(cluster.Config{Self: nd.peer, Replicas: replicas, Timeout: 500 * time.Millisecond}, mem, m.Forwarded)
		nd.client = serve(t, ctx, nd.cl, m)
		nodes[i] = nd
		peers = append(peers, nd.peer)
	}
	for _, nd := range nodes {
		nd.cl.SetPeers(peers)
	}
	return nodes
}

// TestAnyNodeReads: a value written through one node is read through every
// node, and lives only on its owner (replication 1).
func TestAnyNodeReads(t *testing.T) {
	nodes := startCluster(t, 3, 1)
	ctx := context.Background()
	for k := range 30 {
		key := fmt.Sprintf("model@1@0@%04x@bfloat16", k)
		val := bytes.Repeat([]byte{byte(k)}, 1000+k)
		w := lmproto.Dial(nodes[k%3].client, time.Second, 0)
		if err := w.Put(ctx, key, lmproto.Meta{Dtype: 3}, val); err != nil {
			t.Fatal(err)
		}
		_ = w.Close()
		for i, nd := range nodes {
			// A PUT has no reply: poll until the owner applied it.
			var got []byte
			var err error
			deadline := time.Now().Add(2 * time.Second)
			for {
				c := lmproto.Dial(nd.client, time.Second, 0)
				got, _, err = c.Get(ctx, key)
				_ = c.Close()
				if err == nil || time.Now().After(deadline) {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			if err != nil || !bytes.Equal(got, val) {
				t.Fatalf("key %d through node %d: %d bytes, %v", k, i, len(got), err)
			}
		}
		held := 0
		for _, nd := range nodes {
			if nd.mem.Contains(key) {
				held++
			}
		}
		if held != 1 {
			t.Fatalf("key %d stored on %d nodes, want 1", k, held)
		}
	}
	fwd := 0.0
	for _, nd := range nodes {
		fwd += testutil.ToFloat64(nd.m.Forwarded.WithLabelValues("get", "hit"))
	}
	if fwd == 0 {
		t.Fatal("no GET was forwarded")
	}
}

// TestPeerDownIsAMiss: with a node stopped, keys it owned are misses (not
// errors) through the others, and the failure is counted.
func TestPeerDownIsAMiss(t *testing.T) {
	nodes := startCluster(t, 3, 1)
	ctx := context.Background()
	var key string
	for k := range 100 {
		key = fmt.Sprintf("k%d", k)
		if nodes[0].cl.Owners(key)[0] == nodes[2].peer {
			break
		}
	}
	nodes[2].mem.Put(key, &store.Object{Value: []byte("v")})
	nodes[2].halt(t)
	c := lmproto.Dial(nodes[0].client, 2*time.Second, 0)
	defer c.Close()
	if _, _, err := c.Get(ctx, key); !errors.Is(err, lmproto.ErrMiss) {
		t.Fatalf("GET of a key on a stopped node: %v, want a miss", err)
	}
	if testutil.ToFloat64(nodes[0].m.Forwarded.WithLabelValues("get", "error")) < 1 {
		t.Fatal("the failed forward was not counted")
	}
}

// TestReplicationAndMembership: with 2 replicas a key survives its first
// owner's loss; a membership change moves only keys whose owners changed.
func TestReplicationAndMembership(t *testing.T) {
	nodes := startCluster(t, 3, 2)
	ctx := context.Background()
	key := "replicated-key"
	if !nodes[0].cl.Put(ctx, key, &store.Object{Value: []byte("v")}) {
		t.Fatal("put failed")
	}
	owners := nodes[0].cl.Owners(key)
	held := 0
	// A forwarded PUT has no reply: wait for the peer to apply it.
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		held = 0
		for _, nd := range nodes {
			if nd.mem.Contains(key) {
				held++
			}
		}
		if held == 2 {
			break
		}
	}
	if len(owners) != 2 || held != 2 {
		t.Fatalf("owners %v, stored on %d nodes; want 2", owners, held)
	}
	for _, nd := range nodes {
		if nd.peer == owners[0] {
			nd.halt(t)
		}
	}
	var reader *node
	for _, nd := range nodes {
		if nd.peer != owners[0] {
			reader = nd
		}
	}
	if obj, ok := reader.cl.Get(ctx, key); !ok || string(obj.Value) != "v" {
		t.Fatal("the second replica did not serve the key")
	}

	// Adding a fourth node moves about a quarter of the keys.
	before := map[string]string{}
	for k := range 1000 {
		before[fmt.Sprint(k)] = nodes[1].cl.Owners(fmt.Sprint(k))[0]
	}
	nodes[1].cl.SetPeers(append(nodes[1].cl.Peers(), "127.0.0.1:1"))
	moved := 0
	for k, o := range before {
		if now := nodes[1].cl.Owners(k)[0]; now != o {
			if now != "127.0.0.1:1" {
				t.Fatalf("key %s moved between two old nodes", k)
			}
			moved++
		}
	}
	if moved < 150 || moved > 350 {
		t.Fatalf("%d of 1000 keys moved to the new node, want about 250", moved)
	}
}

// blackhole accepts connections and, while dead, never answers them;
// while alive it relays them to a real node's peer listener. It stands for
// a peer that hangs, then recovers, at one fixed address.
type blackhole struct {
	addr  string
	alive atomic.Bool
}

func newBlackhole(t *testing.T, ctx context.Context, backend string) *blackhole {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	context.AfterFunc(ctx, func() { _ = ln.Close() })
	b := &blackhole{addr: ln.Addr().String()}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			context.AfterFunc(ctx, func() { _ = c.Close() })
			if !b.alive.Load() {
				continue // held open, never read: a hung peer
			}
			go func() {
				var d net.Dialer
				up, err := d.DialContext(ctx, "tcp", backend)
				if err != nil {
					_ = c.Close()
					return
				}
				go func() { _, _ = io.Copy(up, c); _ = up.Close() }()
				_, _ = io.Copy(c, up)
				_ = c.Close()
			}()
		}
	}()
	return b
}

// TestHungPeerIsEjected: a peer that accepts and never answers costs the
// forward deadline for its first few failures, then is skipped (a miss in
// well under the deadline) until its backoff ends; once it answers again
// it serves its keys again.
func TestHungPeerIsEjected(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	peerMem := store.NewMemory(64<<20, store.Options{})
	pm := metrics.New(prometheus.NewRegistry(), peerMem)
	hole := newBlackhole(t, ctx, serve(t, ctx, cluster.Local{Mem: peerMem}, pm))

	clock := testclock.New()
	mem := store.NewMemory(64<<20, store.Options{})
	m := metrics.New(prometheus.NewRegistry(), mem)
	const timeout = 100 * time.Millisecond
	cl := cluster.New(cluster.Config{Self: "self:1", Timeout: timeout, FailuresToEject: 2,
		Backoff: time.Second, MaxBackoff: 4 * time.Second, Now: clock.Now}, mem, m.Forwarded)
	cl.SetPeers([]string{hole.addr})
	var key string
	for k := range 100 {
		if key = fmt.Sprintf("k%d", k); cl.Owners(key)[0] == hole.addr {
			break
		}
	}
	peerMem.Put(key, &store.Object{Value: []byte("v")})

	get := func() (bool, time.Duration) {
		t0 := time.Now()
		_, ok := cl.Get(ctx, key)
		return ok, time.Since(t0)
	}
	for i := range 2 {
		if ok, took := get(); ok || took < timeout/2 {
			t.Fatalf("failure %d: hit %v after %v; want a miss after about the %v deadline", i, ok, took, timeout)
		}
	}
	for i := range 20 {
		if ok, took := get(); ok || took > timeout/4 {
			t.Fatalf("ejected peer, request %d: hit %v after %v; want a fast miss", i, ok, took)
		}
	}
	if got := testutil.ToFloat64(m.Forwarded.WithLabelValues("get", "skipped")); got != 20 {
		t.Fatalf("skipped forwards counted %v, want 20", got)
	}

	// Still hung when the backoff ends: one probe fails and the backoff
	// doubles (1s -> 2s), so 1.5s later the peer is still skipped.
	clock.Advance(time.Second)
	if ok, took := get(); ok || took < timeout/2 {
		t.Fatalf("probe after the backoff: hit %v after %v; want a slow miss", ok, took)
	}
	clock.Advance(1500 * time.Millisecond)
	if ok, took := get(); ok || took > timeout/4 {
		t.Fatalf("within the doubled backoff: hit %v after %v; want a fast miss", ok, took)
	}

	// Recovered: after the backoff the probe succeeds and the peer stays in.
	hole.alive.Store(true)
	clock.Advance(time.Second)
	for i := range 3 {
		if ok, _ := get(); !ok {
			t.Fatalf("recovered peer, request %d: miss; want its key", i)
		}
	}
}
