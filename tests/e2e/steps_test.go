package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/warmpath/warmpath/tests/harness"
)

// testTraffic: completions and chat, streamed and not, through the
// router's Service with the official client; a repeated long prompt is
// answered with cached tokens; the router's metrics show the routing.
func testTraffic(ctx context.Context, t *testing.T, e *env) {
	cl := newClient(e.router)
	for _, stream := range []bool{false, true} {
		a, err := complete(ctx, cl, "Hello from the e2e suite", stream)
		if err != nil || a.text == "" {
			t.Errorf("completion (stream %v): %q, %v", stream, a.text, err)
		}
		a, err = chat(ctx, cl, "You are terse.", "Say hello.", stream)
		if err != nil || a.text == "" {
			t.Errorf("chat (stream %v): %q, %v", stream, a.text, err)
		}
	}
	prompt := longPrompt("traffic")
	first, err := complete(ctx, cl, prompt, false)
	if err != nil {
		t.Fatalf("long prompt: %v", err)
	}
	second, err := complete(ctx, cl, prompt, true)
	if err != nil {
		t.Fatalf("long prompt again: %v", err)
	}
	t.Logf("long prompt: %d tokens, cached %d then %d", first.prompt, first.cached, second.cached)
	if second.cached < 256 || second.cached <= first.cached {
		t.Errorf("repeated prompt: cached_tokens %d (first time %d), want at least a chunk more", second.cached, first.cached)
	}
	_, routers := e.routerPods(ctx, t)
	var routed float64
	for _, r := range routers {
		n, err := scrape(ctx, r+"/metrics", "warmpath_router_requests_total", `strategy="prefixaware"`, `code="200"`)
		if err != nil {
			t.Fatal(err)
		}
		routed += n
	}
	if routed < 6 {
		t.Errorf("routers counted %v requests answered 200 under prefixaware, want the 6 sent", routed)
	}
}

// testStrategySwitch: each strategy set on the live endpoint reaches every
// router without a restart and without a failed request, and shows in the
// router's metrics.
func testStrategySwitch(ctx context.Context, t *testing.T, e *env) {
	pods, routers := e.routerPods(ctx, t)
	before := map[string]int32{}
	for _, p := range pods {
		before[p.Name] = restarts(p.Status.ContainerStatuses)
	}
	l := startLoad(ctx, e.router, 2)
	for _, s := range []string{"kvaware", "session", "roundrobin", "prefixaware"} {
		e.setStrategy(ctx, t, routers, s)
		eventually(ctx, t, time.Minute, s+" routes requests", func() error {
			var n float64
			for _, r := range routers {
				v, err := scrape(ctx, r+"/metrics", "warmpath_router_requests_total", fmt.Sprintf("strategy=%q", s), `code="200"`)
				if err != nil {
					return err
				}
				n += v
			}
			if n == 0 {
				return fmt.Errorf("no request answered under %s yet", s)
			}
			return nil
		})
	}
	l.finish(t, "load across four strategy switches")
	now, _ := e.routerPods(ctx, t)
	for _, p := range now {
		r, ok := before[p.Name]
		if !ok {
			t.Errorf("router pod %s is new: the switch replaced the routers instead of reloading them", p.Name)
		} else if got := restarts(p.Status.ContainerStatuses); got != r {
			t.Errorf("router pod %s restarted %d times during the switches", p.Name, got-r)
		}
	}
}

// setStrategy sets the live endpoint's routing strategy and waits until
// every router runs it (the kubelet refreshes the mounted ConfigMap, the
// router reloads it).
func (e *env) setStrategy(ctx context.Context, t *testing.T, routers []string, s string) {
	t.Helper()
	e.c.patchEndpoint(ctx, t, fmt.Sprintf(`{"spec":{"intelligentRoutingSpec":{"routingStrategy":%q}}}`, s))
	start := time.Now()
	eventually(ctx, t, 3*time.Minute, "routers run "+s, func() error {
		for _, r := range routers {
			v, err := routerState(ctx, r)
			if err != nil {
				return err
			}
			if v.strategy != s {
				return fmt.Errorf("router %s runs %s", r, v.strategy)
			}
		}
		return nil
	})
	t.Logf("%s reached every router in %s", s, time.Since(start).Round(time.Second))
}

func restarts(cs []corev1.ContainerStatus) int32 {
	var n int32
	for _, c := range cs {
		n += c.RestartCount
	}
	return n
}

// testScale: replicas up then down under load; the routers' worker sets
// follow the EndpointSlices, a terminating worker leaves them at once, and
// no request fails.
func testScale(ctx context.Context, t *testing.T, e *env) {
	l := startLoad(ctx, e.router, 2)
	e.c.patchEndpoint(ctx, t, `{"spec":{"replicas":3}}`)
	e.waitRoutersSee(ctx, t, e.workerURLs(ctx, t, 3), 2*time.Minute)
	t.Log("routers hold 3 workers")

	e.c.patchEndpoint(ctx, t, `{"spec":{"replicas":1}}`)
	// The two pods the Deployment removes: from the moment they are
	// terminating, no router may hold them.
	var leaving []string
	eventually(ctx, t, time.Minute, "two workers terminating", func() error {
		pods, err := e.c.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: workerSel})
		if err != nil {
			return err
		}
		leaving = leaving[:0]
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil && p.Status.PodIP != "" {
				leaving = append(leaving, fmt.Sprintf("http://%s:8000", p.Status.PodIP))
			}
		}
		if len(leaving) < 2 {
			return fmt.Errorf("%d terminating", len(leaving))
		}
		return nil
	})
	_, routers := e.routerPods(ctx, t)
	eventually(ctx, t, 10*time.Second, "terminating workers dropped by every router", func() error {
		for _, r := range routers {
			v, err := routerState(ctx, r)
			if err != nil {
				return err
			}
			for _, w := range leaving {
				if slices.Contains(v.workers, w) {
					return fmt.Errorf("router %s still holds terminating worker %s", r, w)
				}
			}
		}
		return nil
	})
	e.waitRoutersSee(ctx, t, e.workerURLs(ctx, t, 1), 2*time.Minute)
	l.finish(t, "load while scaling 2 -> 3 -> 1")
	e.c.patchEndpoint(ctx, t, `{"spec":{"replicas":2}}`)
	e.waitRoutersSee(ctx, t, e.workerURLs(ctx, t, 2), 3*time.Minute)
}

// testWorkerLoss: a worker pod deleted under load costs no non-streamed
// request, and its replacement joins the routers.
func testWorkerLoss(ctx context.Context, t *testing.T, e *env) {
	pods := e.c.waitPodsReady(ctx, t, ns, workerSel, 2, 2*time.Minute)
	l := startLoad(ctx, e.router, 3)
	eventually(ctx, t, time.Minute, "load under way", func() error {
		if n := l.ok.Load(); n < 10 {
			return fmt.Errorf("%d requests answered", n)
		}
		return nil
	})
	victim := pods[0].Name
	if err := e.c.cs.CoreV1().Pods(ns).Delete(ctx, victim, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete worker pod %s: %v", victim, err)
	}
	t.Logf("deleted worker pod %s", victim)
	eventually(ctx, t, 2*time.Minute, "the deleted worker gone", func() error {
		_, err := e.c.cs.CoreV1().Pods(ns).Get(ctx, victim, metav1.GetOptions{})
		if err == nil {
			return fmt.Errorf("pod %s still exists", victim)
		}
		return nil
	})
	e.waitRoutersSee(ctx, t, e.workerURLs(ctx, t, 2), 3*time.Minute)
	l.finish(t, "load while a worker pod was deleted")
}

// testL2Sharing: a prompt prefilled on one worker is served to another from
// the cache server (the L2 DaemonSet), not recomputed.
func testL2Sharing(ctx context.Context, t *testing.T, e *env) {
	pods := e.c.waitPodsReady(ctx, t, ns, workerSel, 2, 2*time.Minute)
	urls := podURLs(pods, 8000)
	a, b := urls[0], urls[1]
	prompt := longPrompt(fmt.Sprintf("l2-%d", time.Now().UnixNano()))
	first, err := complete(ctx, newClient(a), prompt, false)
	if err != nil {
		t.Fatalf("worker a (%s): %v", a, err)
	}
	readBefore, err := scrape(ctx, b+"/metrics", "lmcache:num_remote_read_bytes_total")
	if err != nil {
		t.Fatal(err)
	}
	// LMCache stores chunks to L2 behind the request: give it a moment.
	var second answer
	eventually(ctx, t, 30*time.Second, "worker b reads the prefix from L2", func() error {
		second, err = complete(ctx, newClient(b), prompt, false)
		if err != nil {
			return err
		}
		if second.cached < 256 {
			return fmt.Errorf("worker b cached_tokens %d", second.cached)
		}
		return nil
	})
	readAfter, err := scrape(ctx, b+"/metrics", "lmcache:num_remote_read_bytes_total")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("prompt %d tokens: worker a cached %d; worker b cached %d, read %.0f bytes from L2", first.prompt, first.cached, second.cached, readAfter-readBefore)
	if readAfter <= readBefore {
		t.Errorf("worker b read nothing from the cache server (lmcache:num_remote_read_bytes_total %v -> %v)", readBefore, readAfter)
	}

	// The routers follow the cache servers' own KV events, which the
	// operator pointed them at (the chart's headless peers Service, found
	// by DNS): every router follows every cache server pod, connected, and
	// holds the chunks just stored.
	caches := e.c.waitPodsReady(ctx, t, ns, cacheSel, -1, time.Minute)
	_, routers := e.routerPods(ctx, t)
	var followed []string
	eventually(ctx, t, time.Minute, "the routers follow the cache servers' KV events", func() error {
		followed = followed[:0]
		for _, r := range routers {
			b, err := harness.GetBody(ctx, r+"/debug/endpoints")
			if err != nil {
				return err
			}
			var v struct {
				L2 struct {
					Servers []struct {
						Events    string `json:"events"`
						Connected bool   `json:"connected"`
						Chunks    int    `json:"chunks"`
					} `json:"servers"`
				} `json:"l2"`
			}
			if err := json.Unmarshal(b, &v); err != nil {
				return fmt.Errorf("/debug/endpoints: %w", err)
			}
			chunks := 0
			for _, s := range v.L2.Servers {
				if !s.Connected {
					return fmt.Errorf("router %s: cache server %s not connected", r, s.Events)
				}
				chunks += s.Chunks
			}
			if len(v.L2.Servers) != len(caches) || int64(chunks) < second.cached/256 {
				return fmt.Errorf("router %s follows %d cache servers holding %d chunks, want %d holding ≥ %d", r, len(v.L2.Servers), chunks, len(caches), second.cached/256)
			}
			followed = append(followed, fmt.Sprintf("%s: %d cache servers, %d chunks", r, len(v.L2.Servers), chunks))
		}
		return nil
	})
	t.Logf("routers follow the cache servers' KV events: %v", followed)
}
