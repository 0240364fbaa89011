package faults

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/warmpath/warmpath/libs/lmproto"
	"github.com/warmpath/warmpath/tests/harness"
)

// TestCacheNodePartitioned runs two cache servers in cluster mode and
// takes one (B) off their network with docker network disconnect, then puts
// it back. Through the other (A), reads of keys B owns are misses, never
// errors, each answered within --peer-timeout plus slack; A's own keys still
// hit. Once B is back, keys written after are read back through A, B's
// included, and B's keys from before the partition hit again.
func TestCacheNodePartitioned(t *testing.T) {
	const (
		peerTimeout = 500 * time.Millisecond
		// readBound is what one read through A may take during the
		// partition: the peer deadline, plus slack for two shared cores.
		readBound  = peerTimeout + 1500*time.Millisecond
		keys       = 40
		partition  = 6 * time.Second
		rejoinMax  = 30 * time.Second
		backoffMax = 2 * time.Second
	)
	nw := harness.NewNetwork(t)
	a, b := cacheCluster(t, nw, peerTimeout, backoffMax)
	sc := &scenario{Fault: fmt.Sprintf("docker network disconnect of one of two cache servers in cluster mode for %v, then docker network connect", partition),
		Duration: partition.Seconds(), Recovery: map[string]float64{}, Extra: map[string]float64{}}
	record(t, "cache_node_partitioned", sc)

	lm := lmproto.Dial(hostPort(t, a, lmPort), 10*time.Second, 0)
	defer lm.Close()
	put := func(key string, i int) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		if err := lm.Put(ctx, key, objMeta(i), smallValue(key)); err != nil {
			t.Fatalf("PUT %s through A: %v", key, err)
		}
	}
	// get reads key through A: hit (exact), miss, or an error, and how long
	// it took.
	get := func(key string) (hit bool, d time.Duration, err error) {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		start := time.Now()
		v, _, err := lm.Get(ctx, key)
		d = time.Since(start)
		switch {
		case errors.Is(err, lmproto.ErrMiss):
			return false, d, nil
		case err != nil:
			return false, d, err
		case !slices.Equal(v, smallValue(key)):
			return false, d, fmt.Errorf("GET %s: %d bytes, not what was stored", key, len(v))
		}
		return true, d, nil
	}

	before := make([]string, keys)
	for i := range before {
		before[i] = fmt.Sprintf("part-before-%04d", i)
		put(before[i], i)
	}
	// An lm:// PUT has no reply: A forwards it to its owner while the
	// client goes on. A read on the same connection comes after it, so
	// ask B what it holds only once each key has read back through A.
	for _, k := range before {
		if hit, _, err := get(k); !hit || err != nil {
			t.Fatalf("GET %s through A before the partition: hit %v, %v", k, hit, err)
		}
	}
	bOwns := map[string]bool{}
	ownedByB := 0
	for _, k := range before {
		on, err := onNode(t, b.URL, k)
		if err != nil {
			t.Fatal(err)
		}
		bOwns[k] = on
		if on {
			ownedByB++
		}
	}
	if ownedByB == 0 || ownedByB == keys {
		t.Fatalf("B owns %d of %d keys: want some of each", ownedByB, keys)
	}
	sc.Extra["keys_owned_by_b"] = float64(ownedByB)

	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cutAt := time.Now()
	if err := b.Disconnect(ctx); err != nil {
		t.Fatal(err)
	}
	// Read every key through A, over and over, while B is away.
	var misses, hitsA, wrongMissA, errs, slow int
	var longest time.Duration
	for time.Since(cutAt) < partition {
		for _, k := range before {
			hit, d, err := get(k)
			longest = max(longest, d)
			switch {
			case err != nil:
				errs++
				t.Errorf("GET %s through A during the partition (B owns it: %v): %v after %v", k, bOwns[k], err, d)
			case bOwns[k] && hit:
				t.Errorf("GET %s through A during the partition: a hit, but B owns it", k)
			case bOwns[k]:
				misses++
			case hit:
				hitsA++
			default:
				wrongMissA++
				t.Errorf("GET %s through A during the partition: a miss, but A owns it", k)
			}
			if d > readBound {
				slow++
				t.Errorf("GET %s through A during the partition took %v, want ≤ %v (--peer-timeout %v)", k, d, readBound, peerTimeout)
			}
		}
		time.Sleep(100 * time.Millisecond) // bounded load: a pass of 40 reads every ~0.1 s
	}
	sc.Extra["partition_reads_missed_b_keys"], sc.Extra["partition_reads_hit_a_keys"] = float64(misses), float64(hitsA)
	sc.Extra["partition_reads_failed"], sc.Extra["partition_reads_over_bound"] = float64(errs), float64(slow)
	sc.Extra["partition_longest_read_seconds"] = round(longest.Seconds())
	fw, _, _ := metric(t.Context(), a.URL, "warmpath_cache_forwarded_requests_total", `op="get",result="skipped"`)
	t.Logf("partition: %d misses of B's keys, %d hits of A's, %d errors, longest read %v; A's skipped forwards %v",
		misses, hitsA, errs, longest, fw)

	joinAt := time.Now()
	if err := b.Reconnect(ctx); err != nil {
		t.Fatal(err)
	}
	// B's published ports may move with its new endpoint on the network.
	bURL := "http://" + hostPort(t, b, "8080")
	// Rejoined: a key B owns, written through A now, reads back through A.
	var rejoined time.Time
	deadline := joinAt.Add(rejoinMax)
	for n := 0; rejoined.IsZero(); n++ {
		k := fmt.Sprintf("part-probe-%04d", n)
		put(k, n)
		if hit, _, err := get(k); err == nil && hit {
			if on, err := onNode(t, bURL, k); err == nil && on {
				rejoined = time.Now()
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("B not back %v after its reconnect: keys it owns written through A do not read back", rejoinMax)
		}
		time.Sleep(100 * time.Millisecond)
	}
	sc.Recovery["reconnect_to_rejoined"] = round(rejoined.Sub(joinAt).Seconds())

	var afterHits, afterB, afterFail int
	for i := range keys {
		k := fmt.Sprintf("part-after-%04d", i)
		put(k, i)
		hit, _, err := get(k)
		if !hit || err != nil {
			afterFail++
			t.Errorf("GET %s through A after B rejoined: hit %v, %v", k, hit, err)
			continue
		}
		afterHits++
		if on, err := onNode(t, bURL, k); err != nil {
			t.Error(err)
		} else if on {
			afterB++
		}
	}
	var beforeHits int
	for _, k := range before {
		if hit, _, err := get(k); hit && err == nil {
			beforeHits++
		} else {
			t.Errorf("GET %s, written before the partition, through A after B rejoined: hit %v, %v", k, hit, err)
		}
	}
	sc.Extra["after_reads_hit"], sc.Extra["after_keys_on_b"], sc.Extra["after_reads_failed"] = float64(afterHits), float64(afterB), float64(afterFail)
	sc.Extra["before_keys_hit_after_rejoin"] = float64(beforeHits)
	t.Logf("B rejoined %.2fs after its reconnect; after: %d of %d written keys hit through A (%d on B); %d of %d keys from before hit again",
		sc.Recovery["reconnect_to_rejoined"], afterHits, keys, afterB, beforeHits, keys)
	if afterB == 0 {
		t.Errorf("none of the %d keys written after the rejoin is on B", keys)
	}
	if misses == 0 {
		t.Error("no read of B's keys during the partition")
	}
}

// smallValue is key's 4 KiB value.
func smallValue(key string) []byte {
	b := make([]byte, 4<<10)
	for i := range b {
		b[i] = key[i%len(key)] ^ byte(i)
	}
	return b
}

// onNode says whether the node at base (its HTTP) holds key in its own
// store.
func onNode(t *testing.T, base, key string) (bool, error) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, base+"/v1/objects/"+url.PathEscape(key), nil)
	if err != nil {
		return false, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false, fmt.Errorf("HEAD %s: %w", key, err)
	}
	resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		return true, nil
	case http.StatusNotFound:
		return false, nil
	}
	return false, fmt.Errorf("HEAD %s on %s: %d", key, base, resp.StatusCode)
}

// cacheCluster starts two cache servers in cluster mode on nw, cache-a and
// cache-b, each owning half the keys (--replicas 1); extra may change each
// node's Spec (a flag it appends wins over the one before).
func cacheCluster(t *testing.T, nw *harness.Network, peerTimeout, backoffMax time.Duration, extra ...func(alias string, s *harness.Spec)) (a, b *harness.Container) {
	t.Helper()
	peers := "cache-a:65433,cache-b:65433"
	node := func(alias string) *harness.Container {
		s := harness.Spec{Network: nw, Aliases: []string{alias},
			Args: cacheArgs("--memory-capacity-bytes", itoa(64<<20), "--peer-listen", "0.0.0.0:65433",
				"--advertise", alias+":65433", "--peers", peers, "--peer-timeout", peerTimeout.String(),
				"--peer-backoff-max", backoffMax.String())}
		for _, f := range extra {
			f(alias, &s)
		}
		return startCache(t, s)
	}
	return node("cache-a"), node("cache-b")
}
