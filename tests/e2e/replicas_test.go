package e2e

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"
)

// testRouterReplicas: with routerReplicas 2 on the real node, the operator
// peers the routers through their headless Service (pod IPs from the
// downward API, DNS from CoreDNS): each relays to the other the
// cache-aware requests the other owns and reads the other's requests in
// flight per worker, pod to pod; the report is refused to an address
// outside the set. Back to one router after.
func testRouterReplicas(ctx context.Context, t *testing.T, e *env) {
	gen := e.generation(ctx, t, endpoint+"-router")
	e.c.patchEndpoint(ctx, t, `{"spec":{"intelligentRoutingSpec":{"routerReplicas":2}}}`)
	e.waitRolledOut(ctx, t, endpoint+"-router", gen, 3*time.Minute)
	pods := e.c.waitPodsReady(ctx, t, ns, routerSel, 2, 3*time.Minute)
	routers := podURLs(pods, 8080)

	// Each router has found the other (peer discovery re-resolves the
	// headless Service, which lists a pod once it is Ready).
	eventually(ctx, t, 2*time.Minute, "each router reading the other's load", func() error {
		for _, r := range routers {
			ok, err := scrape(ctx, r+"/metrics", "warmpath_router_peer_load_polls_total", `result="ok"`)
			if err != nil {
				return err
			}
			if ok == 0 {
				return fmt.Errorf("router %s has read no peer's load", r)
			}
		}
		return nil
	})
	failedBefore := 0.0
	for _, r := range routers {
		f, err := scrape(ctx, r+"/metrics", "warmpath_router_peer_load_polls_total", `result="failed"`)
		if err != nil {
			t.Fatal(err)
		}
		failedBefore += f
	}

	// Distinct prompts, each to one router, alternately: about half are
	// owned by the other one.
	const n = 16
	for i := range n {
		cl := newClient(routers[i%len(routers)])
		if _, err := complete(ctx, cl, longPrompt(fmt.Sprintf("replicas %d", i)), i%4 == 0); err != nil {
			t.Fatalf("request %d through router %s: %v", i, routers[i%len(routers)], err)
		}
	}
	var own, forwarded, failedRelays, failedPolls float64
	for _, r := range routers {
		for _, m := range []struct {
			name, matcher string
			sum           *float64
		}{
			{"warmpath_router_peer_relays_total", `result="own"`, &own},
			{"warmpath_router_peer_relays_total", `result="forwarded"`, &forwarded},
			{"warmpath_router_peer_relays_total", `result="failed"`, &failedRelays},
			{"warmpath_router_peer_load_polls_total", `result="failed"`, &failedPolls},
		} {
			v, err := scrape(ctx, r+"/metrics", m.name, m.matcher)
			if err != nil {
				t.Fatal(err)
			}
			*m.sum += v
		}
	}
	t.Logf("%d requests over 2 routers: %v routed by their owner where they arrived, %v relayed, %v relays failed; peer load reads failed since both were up: %v",
		n, own, forwarded, failedRelays, failedPolls-failedBefore)
	if own+forwarded+failedRelays != n || forwarded == 0 || failedRelays != 0 {
		t.Errorf("relays: own %v, forwarded %v, failed %v; want one look per request (%d), some relayed, none failed", own, forwarded, failedRelays, n)
	}
	if failedPolls != failedBefore {
		t.Errorf("%v peer load reads failed while both routers ran", failedPolls-failedBefore)
	}

	// This host is not a router: its read of a router's report is refused.
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, routers[0]+"/peers/load", http.NoBody)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("GET /peers/load from the node's host: status %d, want 403", resp.StatusCode)
	}

	gen = e.generation(ctx, t, endpoint+"-router")
	e.c.patchEndpoint(ctx, t, `{"spec":{"intelligentRoutingSpec":{"routerReplicas":1}}}`)
	e.waitRolledOut(ctx, t, endpoint+"-router", gen, 3*time.Minute)
	e.c.waitPodsReady(ctx, t, ns, routerSel, 1, 3*time.Minute)
}
