package router

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

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
	// The router's own load views: a 1 s scrape of the workers (the
	// harness's 50 ms would show every replica the others' load almost
	// as fresh as its own) and, peered, the others' reports every 100 ms.
	args := []string{"--strategy", name, "--scrape-interval", "1s"}
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
			switch name {
			case "prefixaware":
				// prefixaware's live hit rate moves by ±0.1 between runs of
				// the same routers (one router: 0.73-0.84; three peered:
				// 0.64-0.89, once 0.20 below one router in the same run),
				// so one run cannot tell 2 points from 10; the des
				// benchmark, where the order is fixed, measures that bound.
				// What one run does show is agreement: peered replicas win
				// back most of what routing alone loses.
				if half := (one.hitRate + alone.hitRate) / 2; peered.hitRate < half {
					t.Errorf("3 peered routers: hit rate %.3f, want at least halfway from 3 alone (%.3f) to one router (%.3f)", peered.hitRate, alone.hitRate, one.hitRate)
				}
			default:
				if peered.hitRate < one.hitRate-replicaSlack {
					t.Errorf("3 peered routers: hit rate %.3f, want within %.2f of one router's %.3f", peered.hitRate, replicaSlack, one.hitRate)
				}
			}
		})
	}
}

// replicaSlack is how far below one router three peered kvaware ones may
// land in a live run, where eight clients race and the order requests
// reach the workers varies between runs: issue 21's bound is 2 points in
// the des benchmark (warmpath-bench replicas), where the order is fixed.
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

// TestReplicasSeeEachOthersLoad: a relaying replica reads the others'
// requests in flight at each worker every --peer-load-interval, so its
// load guard sees them within that interval rather than at the next
// scrape of the worker, and forgets them once they end.
func TestReplicasSeeEachOthersLoad(t *testing.T) {
	// Real time, so that requests stay in flight for seconds.
	w := startWorker(t, "--time-scale", "1")
	// roundrobin relays nothing: what router a sees at the worker can
	// only have come from b's report.
	rs := startReplicas(t, 2, true, []*worker{w}, "--strategy", "roundrobin",
		"--scrape-interval", "1h", "--peer-load-interval", "50ms")
	a, b := rs[0], rs[1]

	const n = 4
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			body, _ := json.Marshal(map[string]any{"model": simModel, "prompt": fmt.Sprintf("long answer %d", i), "max_tokens": 300, "ignore_eos": true})
			if resp, out := post(t, b.url+"/v1/completions", string(body)); resp.StatusCode != http.StatusOK {
				t.Errorf("status %d: %s", resp.StatusCode, out)
			}
		})
	}
	waitFor(t, 10*time.Second, "router a to see b's requests at the worker", func() error {
		ep := a.endpoint(t, w.url)
		if ep.PeerInFlight != n || ep.External < n || ep.InFlight != 0 {
			resp, err := http.Get(b.url + "/peers/load")
			var rep []byte
			if err == nil {
				rep, _ = io.ReadAll(resp.Body)
				resp.Body.Close()
			}
			return fmt.Errorf("a's view: in flight %d, peers' %d, external %d; want 0, %d, >= %d (b reports %s %v; a's polls ok %v failed %v)", ep.InFlight, ep.PeerInFlight, ep.External, n, n,
				rep, err, scrape(t, a.url+"/metrics", `warmpath_router_peer_load_polls_total{result="ok"}`), scrape(t, a.url+"/metrics", `warmpath_router_peer_load_polls_total{result="failed"}`))
		}
		return nil
	})
	// Polls failed only while b was starting, after a.
	failedBefore := scrape(t, a.url+"/metrics", `warmpath_router_peer_load_polls_total{result="failed"}`)
	wg.Wait()
	waitFor(t, 5*time.Second, "router a to see b's requests end", func() error {
		if ep := a.endpoint(t, w.url); ep.PeerInFlight != 0 {
			return fmt.Errorf("a still counts %d of b's requests", ep.PeerInFlight)
		}
		return nil
	})
	if ok := scrape(t, a.url+"/metrics", `warmpath_router_peer_load_polls_total{result="ok"}`); ok == 0 {
		t.Errorf("router a: no peer load poll succeeded")
	}
	if failed := scrape(t, a.url+"/metrics", `warmpath_router_peer_load_polls_total{result="failed"}`); failed != failedBefore {
		t.Errorf("router a: %v peer load polls failed while both ran", failed-failedBefore)
	}
	// Only replicas may read a replica's report.
	resp, err := http.Get(a.url + "/peers/load")
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(out), `"inFlight"`) {
		t.Errorf("GET /peers/load from 127.0.0.1, a peer's address here: status %d: %s", resp.StatusCode, out)
	}
}

// waitFor polls check until it returns nil, failing the test with its
// last error after timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRelayedAnswersComplete: a request relayed to the replica owning its
// prompt gets the owner's whole answer, streamed or not, however long.
// (The relaying replica panicked closing a relayed answer it streamed
// through, cutting it off: its client read an unexpected EOF.)
func TestRelayedAnswersComplete(t *testing.T) {
	w := startWorker(t)
	rs := startReplicas(t, 2, true, []*worker{w}, "--strategy", "prefixaware")
	var wg sync.WaitGroup
	for i := range 12 {
		wg.Go(func() {
			stream := i%2 == 0
			body, _ := json.Marshal(map[string]any{"model": simModel, "prompt": fmt.Sprintf("document %d: %s", i, strings.Repeat("words ", 50)),
				"max_tokens": 400, "ignore_eos": true, "stream": stream})
			resp, out := post(t, rs[1].url+"/v1/completions", string(body))
			if resp.StatusCode != http.StatusOK {
				t.Errorf("request %d: status %d: %s", i, resp.StatusCode, out)
				return
			}
			if stream && !strings.HasSuffix(strings.TrimSpace(string(out)), "data: [DONE]") {
				t.Errorf("request %d: stream of %d bytes does not end with [DONE]: ...%s", i, len(out), out[max(0, len(out)-200):])
			}
			if !stream && !json.Valid(out) {
				t.Errorf("request %d: answer of %d bytes is not whole JSON: ...%s", i, len(out), out[max(0, len(out)-200):])
			}
		})
	}
	wg.Wait()
	if n := scrape(t, rs[1].url+"/metrics", `warmpath_router_peer_relays_total{result="forwarded"}`); n == 0 {
		t.Error("no request was relayed: the test no longer checks relayed answers")
	}
}
