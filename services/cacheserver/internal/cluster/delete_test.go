package cluster_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/warmpath/warmpath/libs/lmproto"
	"github.com/warmpath/warmpath/services/cacheserver/internal/store"
)

// TestDeleteReachesOwners: a delete through any node removes the key from
// every owner (RESP DEL is served through the cluster), and reports
// whether it was there.
func TestDeleteReachesOwners(t *testing.T) {
	for _, replicas := range []int{1, 2} {
		t.Run(fmt.Sprintf("replicas %d", replicas), func(t *testing.T) {
			nodes := startCluster(t, 3, replicas)
			ctx := context.Background()
			for k := range 12 {
				key := fmt.Sprintf("del@%d@%04x", replicas, k)
				w := lmproto.Dial(nodes[k%3].client, time.Second, 0)
				if err := w.Put(ctx, key, lmproto.Meta{}, []byte("v")); err != nil {
					t.Fatal(err)
				}
				_ = w.Close()
				held := func() int {
					n := 0
					for _, nd := range nodes {
						if nd.mem.Contains(key) {
							n++
						}
					}
					return n
				}
				// A PUT has no reply: poll until every owner applied it.
				for deadline := time.Now().Add(5 * time.Second); held() < replicas; {
					if time.Now().After(deadline) {
						t.Fatalf("%s: held by %d nodes, want %d", key, held(), replicas)
					}
					time.Sleep(5 * time.Millisecond)
				}
				via := nodes[(k+1)%3]
				if !via.cl.Delete(ctx, key) {
					t.Fatalf("%s: delete reported absent", key)
				}
				if n := held(); n != 0 {
					t.Fatalf("%s: still held by %d nodes after the delete", key, n)
				}
				if via.cl.Delete(ctx, key) {
					t.Fatalf("%s: second delete reported present", key)
				}
			}
		})
	}
}

// TestForwardedPutIsApplied: Put returns once every owner has applied the
// value (lm:// PUT has no reply, so the forward confirms it on the same
// connection), so a RESP SET's OK means a read anywhere finds it.
func TestForwardedPutIsApplied(t *testing.T) {
	nodes := startCluster(t, 3, 2)
	ctx := context.Background()
	for k := range 200 {
		key := fmt.Sprintf("applied@%04x", k)
		if !nodes[k%3].cl.Put(ctx, key, &store.Object{Value: []byte("v")}) {
			t.Fatalf("%s: not stored", key)
		}
		held := 0
		for _, nd := range nodes {
			if nd.mem.Contains(key) {
				held++
			}
		}
		if held != 2 {
			t.Fatalf("%s: held by %d nodes right after Put, want 2", key, held)
		}
	}
}
