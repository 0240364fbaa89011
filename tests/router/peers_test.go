package router

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/warmpath/warmpath/libs/testnet"
)

// replicaRun is one live run of sharedPrefixPrompts through routers.
type replicaRun struct {
	hitRate   float64
	forwarded float64 // requests relayed to their owner, over all routers
	own       float64 // requests routed where they arrived, as their owner
}

// startReplicas starts n routers over workers with args, each also
// naming all n with --peers (and itself with --peer-self) when peered.
func startReplicas(t *testing.T, n int, peered bool, workers []*worker, args ...string) []*router {
	t.Helper()
	addrs, urls := make([]string, n), make([]string, n)
	for i := range addrs {
		addrs[i] = "127.0.0.1:" + strconv.Itoa(testnet.FreePort(t))
		urls[i] = "http://" + addrs[i]
	}
	rs := make([]*router, n)
	for i := range rs {
		a := args
		if peered {
			a = append(slices.Clip(args), "--peers", strings.Join(urls, ","), "--peer-self", urls[i])
		}
		rs[i] = startRouterAt(t, "http", http.DefaultClient, addrs[i], workers, a...)
	}
	return rs
}

// runReplicas starts four simulated workers and n routers (strategy name,
// each knowing the others with --peers when peered) and sends the
// shared-prefix workload, each request to the next router in turn, as a
// Service spreads connections. It returns the workers' prefix-cache hit
// rate and the routers' relay counts.
func runReplicas(t *testing.T, name string, n int, peered bool, prompts []string) replicaRun {
	t.Helper()
	ws := sharedPrefixWorkers(t, name)
	args := []string{"--strategy", name}
	if name == "kvaware" {
		args = append(args, kvEvents()...)
	}
	rs := startReplicas(t, n, peered, ws, args...)

	type job struct{ url, prompt string }
	jobs := make(chan job)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for j := range jobs {
				b, _ := json.Marshal(map[string]any{"model": simModel, "prompt": j.prompt, "max_tokens": 8})
				resp, body := post(t, j.url+"/v1/completions", string(b))
				if resp.StatusCode != http.StatusOK {
					t.Errorf("status %d: %s", resp.StatusCode, body)
				}
			}
		})
	}
	for i, p := range prompts {
		jobs <- job{rs[i%n].url, p}
	}
	close(jobs)
	wg.Wait()

	var res replicaRun
	var hits, queries float64
	for _, w := range ws {
		hits += w.metric(t, "vllm:prefix_cache_hits_total")
		queries += w.metric(t, "vllm:prefix_cache_queries_total")
	}
	res.hitRate = hits / queries
	for _, r := range rs {
		res.forwarded += scrape(t, r.url+"/metrics", `warmpath_router_peer_relays_total{result="forwarded"}`)
		res.own += scrape(t, r.url+"/metrics", `warmpath_router_peer_relays_total{result="own"}`)
	}
	return res
}

// TestReplicasAgree is issue 21's live check of router replicas that
// agree: three routers behind a round-robin client, each relaying a
// request to the replica that owns its prompt's head (--peers), keep one
// router's hit rate, where three that each learn only their own third of
// the decisions do not.
func TestReplicasAgree(t *testing.T) {
	prompts := sharedPrefixPrompts(11, 10)
	for _, name := range []string{"prefixaware", "kvaware"} {
		t.Run(name, func(t *testing.T) {
			one := runReplicas(t, name, 1, false, prompts)
			alone := runReplicas(t, name, 3, false, prompts)
			peered := runReplicas(t, name, 3, true, prompts)
			t.Logf("%s hit rate: 1 router %.3f, 3 alone %.3f, 3 peered %.3f (relayed %v, own %v)",
				name, one.hitRate, alone.hitRate, peered.hitRate, peered.forwarded, peered.own)
			// Every request was looked at once by the replica it reached:
			// about two thirds belong to another replica.
			if got := peered.forwarded + peered.own; got != float64(len(prompts)) {
				t.Errorf("relay counts sum to %v, want one per request (%d)", got, len(prompts))
			}
			if peered.forwarded < float64(len(prompts))/3 {
				t.Errorf("%v requests relayed of %d, want about two thirds", peered.forwarded, len(prompts))
			}
			// The check can fail: prefixaware's replicas routing alone each
			// learn a third of every group (measured 36-37% against 74-76%).
			if name == "prefixaware" && alone.hitRate > one.hitRate-0.15 {
				t.Errorf("3 routers alone: hit rate %.3f, want clearly below one router's %.3f: the workload no longer tells agreeing replicas from others", alone.hitRate, one.hitRate)
			}
			if peered.hitRate < one.hitRate-replicaSlack {
				t.Errorf("3 peered routers: hit rate %.3f, want within %.2f of one router's %.3f", peered.hitRate, replicaSlack, one.hitRate)
			}
		})
	}
}

// replicaSlack is how far below one router three peered ones may land in
// a live run, where eight clients race and the order requests reach the
// workers varies between runs: issue 21's bound is 2 points in the des
// benchmark (warmpath-bench replicas), where the order is fixed.
const replicaSlack = 0.05

// TestReplicaOwnerDown: a replica whose peer is down (a restart, a
// rollout) routes what that peer owns itself; no request is lost and
// each such fallback is counted.
func TestReplicaOwnerDown(t *testing.T) {
	w := startWorker(t)
	addr := "127.0.0.1:" + strconv.Itoa(testnet.FreePort(t))
	dead := "http://127.0.0.1:" + strconv.Itoa(testnet.FreePort(t)) // nothing listens
	r := startRouterAt(t, "http", http.DefaultClient, addr, []*worker{w},
		"--peers", "http://"+addr+","+dead, "--peer-self", "http://"+addr)
	prompts := sharedPrefixPrompts(8, 2)
	for _, p := range prompts {
		b, _ := json.Marshal(map[string]any{"model": simModel, "prompt": p, "max_tokens": 4})
		if resp, body := post(t, r.url+"/v1/completions", string(b)); resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
	}
	failed := scrape(t, r.url+"/metrics", `warmpath_router_peer_relays_total{result="failed"}`)
	own := scrape(t, r.url+"/metrics", `warmpath_router_peer_relays_total{result="own"}`)
	if failed == 0 || failed+own != float64(len(prompts)) {
		t.Errorf("relays: failed %v, own %v; want some failed and one look per request (%d)", failed, own, len(prompts))
	}
}
