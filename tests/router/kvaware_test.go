package router

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/warmpath/warmpath/libs/testnet"
	"github.com/warmpath/warmpath/libs/testredis"
	"github.com/warmpath/warmpath/libs/testwait"
)

// startEventWorker runs vllm-sim publishing KV events on port+1 (replay on
// port+2) in the given encoding.
func startEventWorker(t *testing.T, port int, encoding string, args ...string) *worker {
	t.Helper()
	cfg := fmt.Sprintf(`{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:%d","replay_endpoint":"tcp://*:%d"}`, port+1, port+2)
	return startWorkerOn(t, port, append([]string{"--kv-events-config", cfg, "--kv-events-encoding", encoding}, args...)...)
}

// kvEvents are the router flags pointing it at startEventWorker's sockets.
func kvEvents() []string {
	return []string{"--kv-events-endpoint", "tcp://{host}:{port+1}", "--kv-events-replay-endpoint", "tcp://{host}:{port+2}"}
}

// kvBind are the router flags binding the one SUB socket workers connect
// to (vLLM's other topology), replaying from each worker's port+2.
func kvBind(port int) []string {
	return []string{"--kv-events-bind", fmt.Sprintf("tcp://127.0.0.1:%d", port), "--kv-events-replay-endpoint", "tcp://{host}:{port+2}"}
}

// sendAll posts bodies with a few clients at once and fails on non-200.
func sendAll(t *testing.T, url string, bodies []string) {
	t.Helper()
	jobs := make(chan string)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for b := range jobs {
				resp, body := post(t, url, b)
				if resp.StatusCode != http.StatusOK {
					t.Errorf("status %d: %s", resp.StatusCode, body)
				}
			}
		})
	}
	for _, b := range bodies {
		jobs <- b
	}
	close(jobs)
	wg.Wait()
}

func hitCounts(t *testing.T, ws []*worker) (hits, queries float64) {
	t.Helper()
	for _, w := range ws {
		hits += w.metric(t, "vllm:prefix_cache_hits_total")
		queries += w.metric(t, "vllm:prefix_cache_queries_total")
	}
	return hits, queries
}

// TestKVAwareSeesWhatItDidNotRoute is the kvaware acceptance workload on
// real simulated workers publishing real ZMQ events. Another router
// (round robin) places each group's long prefix on some worker; a second
// router, started only afterwards, then routes the groups' follow-ups.
// prefixaware cannot know where the prefixes went — it learns only from
// its own decisions — while kvaware's index, rebuilt through each worker's
// replay socket on start, sends each follow-up to the worker holding its
// prefix. Completions and chat both; the workers alternate between the
// two event encodings.
func TestKVAwareSeesWhatItDidNotRoute(t *testing.T) {
	const groups = 8
	prefix := func(g int) string {
		var b []byte
		for i := range 60 {
			b = fmt.Appendf(b, "tenant %d policy clause %d: keep records for audit. ", g, i)
		}
		return string(b)
	}
	completion := func(g, q int) string {
		b, _ := json.Marshal(map[string]any{"model": simModel, "prompt": prefix(g) + fmt.Sprintf("Question %d?", q), "max_tokens": 2})
		return string(b)
	}
	chat := func(g, q int) string {
		b, _ := json.Marshal(map[string]any{"model": simModel, "max_tokens": 2, "messages": []map[string]string{
			{"role": "system", "content": prefix(g)}, {"role": "user", "content": fmt.Sprintf("Question %d?", q)}}})
		return string(b)
	}
	run := func(t *testing.T, strategyName string) (hitRate float64, r *router) {
		ws := make([]*worker, 4)
		for i := range ws {
			enc := "map"
			if i%2 == 1 {
				enc = "positional"
			}
			ws[i] = startEventWorker(t, testnet.FreePortRun(t, 3, nil), enc, "--time-scale", "20")
		}
		placer := startRouter(t, ws, "--strategy", "roundrobin")
		var warm, warmChat []string
		for g := range groups {
			warm = append(warm, completion(g, 0))
			warmChat = append(warmChat, chat(g, 0))
		}
		sendAll(t, placer.url+"/v1/completions", warm)
		sendAll(t, placer.url+"/v1/chat/completions", warmChat)

		r = startRouter(t, ws, append(kvEvents(), "--strategy", strategyName)...)
		if strategyName == "kvaware" {
			waitIndexed(t, r, len(ws))
		}
		h0, q0 := hitCounts(t, ws)
		// One follow-up per group: after it, prefixaware would know where
		// it sent the group, so later rounds would not tell them apart.
		var follow, followChat []string
		for g := range groups {
			follow = append(follow, completion(g, 1))
			followChat = append(followChat, chat(g, 1))
		}
		sendAll(t, r.url+"/v1/completions", follow)
		sendAll(t, r.url+"/v1/chat/completions", followChat)
		h1, q1 := hitCounts(t, ws)
		return (h1 - h0) / (q1 - q0), r
	}
	pa, _ := run(t, "prefixaware")
	kv, r := run(t, "kvaware")
	t.Logf("follow-up prefix hit rate: prefixaware %.3f, kvaware %.3f", pa, kv)
	if !(kv > pa+0.3) || kv < 0.8 {
		t.Errorf("kvaware hit rate %.3f, want ≥ 0.8 and clearly above prefixaware's %.3f", kv, pa)
	}
	if got := scrape(t, r.url+"/metrics", `warmpath_router_kv_replays_total{result="ok"`); got < 4 {
		t.Errorf("replays = %v, want one per worker at least (the router joined late)", got)
	}
	if got := scrape(t, r.url+"/metrics", "warmpath_router_tokenize_total"); got < 1 {
		t.Errorf("tokenize_total = %v, want chat and completion prompts tokenized", got)
	}
	// Every answered request's prompt tokens were counted back out of the
	// workers' pending prefill.
	if got := scrape(t, r.url+"/metrics", "warmpath_router_pending_prefill_tokens"); got != 0 {
		t.Errorf("pending_prefill_tokens = %v after every request was answered, want 0", got)
	}
}

// waitIndexed waits until the router's index holds blocks of n workers.
func waitIndexed(t *testing.T, r *router, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if indexed(t, r) >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("index holds blocks of %d workers after 10s, want %d: %s", indexed(t, r), n, r.get(t, "/debug/endpoints"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// indexed counts the workers of whom the router's index holds GPU blocks.
func indexed(t *testing.T, r *router) int {
	t.Helper()
	n := 0
	for _, ep := range r.endpoints(t) {
		if ep.KV.Blocks["gpu"] > 0 {
			n++
		}
	}
	return n
}

// waitEventsApplied waits until r has applied every event batch each of ws
// has numbered so far (or counted it lost: a gap replay could not fill).
func waitEventsApplied(t *testing.T, r *router, ws []*worker) {
	t.Helper()
	for _, w := range ws {
		testwait.For(t, 10*time.Second, "the router to apply "+w.url+"'s event batches", func() bool {
			numbered := scrape(t, w.url+"/metrics", "warmpath_vllmsim_kv_event_batches_total")
			seen := scrape(t, r.url+"/metrics", `warmpath_router_kv_batches_total{outcome="received",worker="`+w.url+`"`) +
				scrape(t, r.url+"/metrics", `warmpath_router_kv_batches_total{outcome="lost",worker="`+w.url+`"`)
			return seen >= numbered
		})
	}
}

// TestKVAwareWorkerRestart: a worker that restarts starts its event
// sequence again; the router drops what it indexed for the old process.
func TestKVAwareWorkerRestart(t *testing.T) {
	port := testnet.FreePortRun(t, 3, nil)
	w := startEventWorker(t, port, "map")
	r := startRouter(t, []*worker{w}, append(kvEvents(), "--strategy", "kvaware")...)
	body := func(s string) string {
		b, _ := json.Marshal(map[string]any{"model": simModel, "prompt": s, "max_tokens": 2})
		return string(b)
	}
	long := func(tag string) string {
		var b []byte
		for i := range 80 {
			b = fmt.Appendf(b, "%s line %d of a long shared document. ", tag, i)
		}
		return string(b)
	}
	sendAll(t, r.url+"/v1/completions", []string{body(long("before"))})
	waitIndexed(t, r, 1)
	before := r.endpoint(t, w.url).KV.Blocks["gpu"]

	w.kill()
	w2 := startEventWorker(t, port, "map")
	// Short, but a few full blocks: the new process publishes from seq 0.
	after := long("after")[:400]
	deadline := time.Now().Add(10 * time.Second)
	for r.endpoint(t, w2.url).KV.Events.Restarts == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no restart detected: %s", r.get(t, "/debug/endpoints"))
		}
		// Until the router sees the new process healthy (the dead one may
		// have been ejected) a request can get 503; only the restart
		// detection is under test here.
		if resp, b := post(t, r.url+"/v1/completions", body(after)); resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("status %d: %s", resp.StatusCode, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if after := r.endpoint(t, w2.url).KV.Blocks["gpu"]; after >= before {
		t.Fatalf("GPU blocks %d after the restart, want fewer than the %d the old process had", after, before)
	}
}

// TestKVAwareDeadWorkerDropsIndex: a worker whose health probes fail (it
// was killed) is out of the rotation and its index entries are dropped at
// once, not kept until it answers again: nothing it held is usable, and
// /debug/kv/held must not say otherwise.
func TestKVAwareDeadWorkerDropsIndex(t *testing.T) {
	w := startEventWorker(t, testnet.FreePortRun(t, 3, nil), "map")
	r := startRouter(t, []*worker{w}, append(kvEvents(), "--strategy", "kvaware")...)
	doc, _ := json.Marshal(map[string]any{"model": simModel, "max_tokens": 2,
		"prompt": strings.Repeat("a document the worker caches. ", 60)})
	sendAll(t, r.url+"/v1/completions", []string{string(doc)})
	waitIndexed(t, r, 1)

	w.kill()
	testwait.For(t, 5*time.Second, "the router to see the worker unhealthy", func() bool { return !r.endpoint(t, w.url).Healthy })
	testwait.For(t, time.Second, "the dead worker's blocks to be dropped", func() bool {
		return r.endpoint(t, w.url).KV.Blocks["gpu"] == 0
	})
	// What /debug/kv/held shows of it, the subscription's own state, too.
	var held struct {
		Hashes []uint64 `json:"hashes"`
	}
	if err := json.Unmarshal(r.get(t, "/debug/kv/held?tier=gpu&worker="+w.url), &held); err != nil || len(held.Hashes) != 0 {
		t.Errorf("/debug/kv/held: %d GPU blocks (%v) after the worker died, want 0", len(held.Hashes), err)
	}
}

// TestKVAwareBindRestartDropsIndex: in the bind topology a restarted
// worker publishes nothing until it caches something, so only its health
// and process tell the router it restarted. Its old blocks must go at
// once, or documents are sent to its empty cache while another worker
// holds their prefix.
func TestKVAwareBindRestartDropsIndex(t *testing.T) {
	bind := testnet.FreePort(t)
	port := testnet.FreePortRun(t, 3, nil)
	cfg := fmt.Sprintf(`{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://127.0.0.1:%d","replay_endpoint":"tcp://*:%d","topic":"kv@127.0.0.1:%d@%s"}`, bind, port+2, port, simModel)
	w := startWorkerOn(t, port, "--kv-events-config", cfg)
	r := startRouter(t, []*worker{w}, append(kvBind(bind), "--strategy", "kvaware")...)
	// The worker connects to the router's socket with a backoff, and a
	// PUB socket drops what it publishes before then: send new documents
	// until its blocks are indexed.
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; r.endpoint(t, w.url).KV.Blocks["gpu"] == 0; i++ {
		if time.Now().After(deadline) {
			t.Fatalf("the worker's blocks were never indexed: %s", r.get(t, "/debug/endpoints"))
		}
		doc, _ := json.Marshal(map[string]any{"model": simModel, "max_tokens": 2,
			"prompt": strings.Repeat(fmt.Sprintf("document %d, which the worker caches. ", i), 40)})
		sendAll(t, r.url+"/v1/completions", []string{string(doc)})
		time.Sleep(50 * time.Millisecond)
	}

	w.kill()
	w2 := startWorkerOn(t, port, "--kv-events-config", cfg)
	testwait.For(t, 20*time.Second, "the router to see the new process healthy", func() bool { return r.endpoint(t, w2.url).InRotation() })
	testwait.For(t, 5*time.Second, "the old process's blocks to be dropped", func() bool {
		return r.endpoint(t, w2.url).KV.Blocks["gpu"] == 0
	})
	if got := scrape(t, r.url+"/metrics", "warmpath_router_worker_restarts_total"); got < 1 {
		t.Errorf("worker_restarts_total = %v, want ≥ 1", got)
	}
}

// TestKVAwareBindTopology: the router binds one SUB socket and the workers
// connect to it, each naming itself in its topic — vLLM's other topology.
func TestKVAwareBindTopology(t *testing.T) {
	bind := testnet.FreePort(t)
	ws := make([]*worker, 2)
	for i := range ws {
		port := testnet.FreePortRun(t, 3, nil)
		topic := fmt.Sprintf("kv@127.0.0.1:%d@%s", port, simModel)
		if i == 1 {
			topic = fmt.Sprintf("http://127.0.0.1:%d", port) // a worker URL works too
		}
		cfg := fmt.Sprintf(`{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://127.0.0.1:%d","replay_endpoint":"tcp://*:%d","topic":%q}`, bind, port+2, topic)
		ws[i] = startWorkerOn(t, port, "--kv-events-config", cfg)
	}
	r := startRouter(t, ws, append(kvBind(bind), "--strategy", "kvaware")...)
	var bodies []string
	for g := range 6 {
		b, _ := json.Marshal(map[string]any{"model": simModel, "max_tokens": 2,
			"prompt": strings.Repeat(fmt.Sprintf("group %d shared context line. ", g), 30)})
		bodies = append(bodies, string(b))
	}
	// Workers reconnect to the router's socket with a backoff: send until
	// both have been heard from.
	deadline := time.Now().Add(20 * time.Second)
	for {
		sendAll(t, r.url+"/v1/completions", bodies)
		if indexed(t, r) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("index holds %d workers' blocks, want 2; unknown topics %v: %s", indexed(t, r),
				scrape(t, r.url+"/metrics", "warmpath_router_kv_unknown_topic_messages_total"), r.get(t, "/debug/endpoints"))
		}
		time.Sleep(200 * time.Millisecond)
		bodies = append(bodies[:0:0], bodies...)
		for i := range bodies {
			bodies[i] = strings.Replace(bodies[i], "line.", "line!", 1) // new prompts, new blocks
		}
	}
	if n := scrape(t, r.url+"/metrics", "warmpath_router_kv_unknown_topic_messages_total"); n != 0 {
		t.Errorf("%v messages with unknown topics", n)
	}
}

// TestKVAwareSharedRedisIndex: two router replicas on one Redis index,
// both subscribed to every worker, apply each batch once and route each
// group's follow-ups to the same worker — the one holding its prefix.
func TestKVAwareSharedRedisIndex(t *testing.T) {
	redisURL := testredis.Start(t)
	ws := []*worker{startEventWorker(t, testnet.FreePortRun(t, 3, nil), "map"), startEventWorker(t, testnet.FreePortRun(t, 3, nil), "positional")}
	placer := startRouter(t, ws, "--strategy", "roundrobin")
	prompt := func(g, q int) string {
		b, _ := json.Marshal(map[string]any{"model": simModel, "max_tokens": 2,
			"prompt": strings.Repeat(fmt.Sprintf("group %d shared context line. ", g), 40) + fmt.Sprintf("Q%d?", q)})
		return string(b)
	}
	const groups = 4
	var warm []string
	for g := range groups {
		warm = append(warm, prompt(g, 0))
	}
	sendAll(t, placer.url+"/v1/completions", warm)
	shared := append(kvEvents(), "--strategy", "kvaware", "--kv-index-redis", redisURL)
	r1, r2 := startRouter(t, ws, shared...), startRouter(t, ws, shared...)
	waitIndexed(t, r1, len(ws))
	waitIndexed(t, r2, len(ws))

	served := func(r *router) map[string]float64 {
		out := map[string]float64{}
		for _, w := range ws {
			out[w.url] = scrape(t, r.url+"/metrics", `warmpath_router_requests_total{code="200",strategy="kvaware",worker="`+w.url+`"`)
		}
		return out
	}
	chosen := func(r *router, body string) string {
		before := served(r)
		sendAll(t, r.url+"/v1/completions", []string{body})
		for w, n := range served(r) {
			if n > before[w] {
				return w
			}
		}
		t.Fatal("no worker served the request")
		return ""
	}
	for g := range groups {
		a, b := chosen(r1, prompt(g, 1)), chosen(r2, prompt(g, 2))
		if a != b {
			t.Errorf("group %d: replica 1 chose %s, replica 2 chose %s", g, a, b)
		}
	}
	// Each block is counted once although both replicas applied every batch.
	opts, _ := redis.ParseURL(redisURL)
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	keys, err := rdb.Keys(context.Background(), "{warmpath:kv:*}:b:*").Result()
	if err != nil || len(keys) == 0 {
		t.Fatalf("no block keys in Redis (%v)", err)
	}
	for _, k := range keys[:min(len(keys), 50)] {
		for f, v := range rdb.HGetAll(context.Background(), k).Val() {
			if v != "1" {
				t.Fatalf("%s %s = %s copies, want 1 (a batch applied twice?)", k, f, v)
			}
		}
	}
}

// TestKVAwareSeesEvictions: caches small enough to evict, and evictions
// prefixaware cannot see. Each group's prefix is placed by the router
// under test and copied once more by another router; then two workers are
// flooded directly (another tenant's traffic) until they have evicted every
// prefix. prefixaware still believes the flooded workers hold their groups
// and sends the follow-ups there; kvaware has seen the BlockRemoved events
// and sends them to the surviving copy where one exists.
func TestKVAwareSeesEvictions(t *testing.T) {
	const groups = 12
	prompt := func(g, q int) string {
		b, _ := json.Marshal(map[string]any{"model": simModel, "max_tokens": 2,
			"prompt": strings.Repeat(fmt.Sprintf("tenant %d handbook section. ", g), 90) + fmt.Sprintf("Question %d?", q)})
		return string(b)
	}
	run := func(t *testing.T, strategyName string) float64 {
		ws := make([]*worker, 4)
		for i := range ws {
			// 400 blocks of 16 tokens: a flood of a few long prompts evicts
			// every group prefix (about 700 tokens each) a worker holds.
			ws[i] = startEventWorker(t, testnet.FreePortRun(t, 3, nil), "map", "--num-gpu-blocks-override", "400", "--max-model-len", "4096", "--time-scale", "20")
		}
		r := startRouter(t, ws, append(kvEvents(), "--strategy", strategyName)...)
		placer := startRouter(t, ws, "--strategy", "roundrobin")
		if strategyName == "kvaware" {
			waitIndexed(t, r, 0)
		}
		for g := range groups {
			sendAll(t, r.url+"/v1/completions", []string{prompt(g, 0)})
		}
		var copies []string
		for g := range groups {
			copies = append(copies, prompt(g, 0))
		}
		sendAll(t, placer.url+"/v1/completions", copies)
		// Another tenant floods directly the two workers the router used
		// most, where most groups' first copies live.
		used := func(w *worker) float64 {
			return scrape(t, r.url+"/metrics", `warmpath_router_requests_total{code="200",strategy="`+strategyName+`",worker="`+w.url+`"`)
		}
		byUse := slices.Clone(ws)
		slices.SortFunc(byUse, func(a, b *worker) int { return cmp.Compare(used(b), used(a)) })
		for _, w := range byUse[:2] {
			var flood []string
			for i := range 6 {
				b, _ := json.Marshal(map[string]any{"model": simModel, "max_tokens": 2,
					"prompt": strings.Repeat(fmt.Sprintf("unrelated tenant document %d line. ", i), 120)})
				flood = append(flood, string(b))
			}
			sendAll(t, w.url+"/v1/completions", flood)
		}
		waitEventsApplied(t, r, ws) // the removals reach the subscriber
		h0, q0 := hitCounts(t, ws)
		for g := range groups {
			sendAll(t, r.url+"/v1/completions", []string{prompt(g, 1)})
		}
		h1, q1 := hitCounts(t, ws)
		return (h1 - h0) / (q1 - q0)
	}
	pa := run(t, "prefixaware")
	kv := run(t, "kvaware")
	t.Logf("follow-up prefix hit rate after evictions: prefixaware %.3f, kvaware %.3f", pa, kv)
	if !(kv > pa+0.15) {
		t.Errorf("kvaware hit rate %.3f, want clearly above prefixaware's %.3f", kv, pa)
	}
}
