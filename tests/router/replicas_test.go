package router

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warmpath/warmpath/libs/fleetlimit"
)

// TestReplicasShareTheLimit runs three router processes in front of the
// same two workers, each holding the share of an endpoint-wide
// requestLimits that the operator writes into its configuration
// (fleetlimit.PerReplica), and drives far more concurrent requests than
// the total through all three. The routers share no state: each admits
// its own share, so together they admit at most the sum of the shares,
// which is never more than the total (the remainder of the division is
// lost) — except when the total is smaller than the number of routers,
// where each still takes 1 rather than 0, which means unlimited.
//
// Concurrency is counted at the workers by a proxy in front of each, which
// counts a request from its arrival until the worker's whole answer has
// come back (before handing it on to the router, which frees its slot only
// after that), so no peak is missed and none is made up. Counts only: the
// machine may be slow, and nothing here depends on how fast it is.
func TestReplicasShareTheLimit(t *testing.T) {
	const routers = 3
	tests := []struct {
		name         string
		total, queue int32
		overflow     int
		// peered routers relay each request to the replica owning its
		// prompt (--peers), which does not take a second slot for it.
		peered bool
	}{
		{"7 over 3 routers: 2 each, the fleet admits 6 <= 7", 7, 6, 429, false},
		{"12 over 3 routers: 4 each, the fleet admits 12", 12, 3, 503, false},
		{"2 over 3 routers: 1 each, not 0 (unlimited): the fleet admits 3 > 2", 2, 0, 429, false},
		{"7 over 3 relaying routers: the slot stays where the request arrived", 7, 6, 429, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			per, queue := fleetlimit.PerReplica(tt.total, routers), fleetlimit.PerReplica(tt.queue, routers)
			if per < 1 {
				t.Fatalf("share of %d among %d routers is %d: 0 would be unlimited", tt.total, routers, per)
			}
			gate := &concurrency{}
			workers := []*worker{countedWorker(t, gate), countedWorker(t, gate)}
			cfg := writeLimits(t, per, queue, tt.overflow)
			rs := startReplicas(t, routers, tt.peered, workers, "--config", cfg)

			res := drive(t, rs, tt.overflow, 10, 6)
			peak, atWorkers := gate.stats()
			fleet := fleetlimit.Fleet(tt.total, routers)
			t.Logf("total %d over %d routers: %d each (queue %d each); sent %d: %d completed, %d rejected with %d; peak at the workers %d (the fleet admits at most %d)",
				tt.total, routers, per, queue, res.sent, res.completed, res.rejected, tt.overflow, peak, fleet)

			if tt.peered {
				relayed := 0.0
				for _, r := range rs {
					relayed += scrape(t, r.url+"/metrics", `warmpath_router_peer_relays_total{result="forwarded"}`)
				}
				if relayed == 0 {
					t.Error("no request was relayed between the peered routers")
				}
			}
			if peak > int(fleet) {
				t.Errorf("peak of %d requests at the workers, over the %d the routers' shares add up to", peak, fleet)
			}
			if !fleetlimit.Overcommitted(tt.total, routers) && peak > int(tt.total) {
				t.Errorf("peak of %d requests at the workers, over the endpoint's total of %d", peak, tt.total)
			}
			for _, bad := range res.bad {
				t.Error(bad)
			}
			if res.completed+res.rejected != res.sent {
				t.Errorf("%d sent, %d completed + %d rejected: %d lost", res.sent, res.completed, res.rejected, res.sent-res.completed-res.rejected)
			}
			// Every completion ran at a worker exactly once, and nothing
			// ran there that the client did not get back.
			if atWorkers != res.completed {
				t.Errorf("the workers ran %d requests, the clients got %d completions", atWorkers, res.completed)
			}
			if res.completed == 0 || res.rejected == 0 {
				t.Errorf("%d completed, %d rejected: the load should both fill the routers and overflow them", res.completed, res.rejected)
			}
		})
	}
}

// concurrency counts requests in progress at the workers.
type concurrency struct {
	mu                sync.Mutex
	now, peak, served int
}

func (c *concurrency) enter() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now++
	c.served++
	c.peak = max(c.peak, c.now)
}

func (c *concurrency) leave() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now--
}

func (c *concurrency) stats() (peak, served int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.peak, c.served
}

// countedWorker is a vllm-sim worker behind a proxy that counts its
// inference requests (POST /v1/...) in gate; probes, scrapes and
// tokenization pass uncounted.
func countedWorker(t *testing.T, gate *concurrency) *worker {
	t.Helper()
	// Slowed down so that a request holds its slot while others arrive.
	sim := startWorker(t, "--time-scale", "2")
	h := http.HandlerFunc(func(rw http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodPost || !strings.HasPrefix(req.URL.Path, "/v1/") {
			proxyTo(rw, req, sim.url)
			return
		}
		gate.enter()
		resp, body, err := forward(req, sim.url)
		// Left before the answer goes on: the router frees the request's
		// slot only once it has the whole answer, so a request it admits
		// next never overlaps this one here.
		gate.leave()
		if err != nil {
			http.Error(rw, err.Error(), http.StatusBadGateway)
			return
		}
		for k, vv := range resp.Header {
			rw.Header()[k] = vv
		}
		rw.WriteHeader(resp.StatusCode)
		_, _ = rw.Write(body)
	})
	return serveSpy(t, &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second})
}

// forward sends req to target and reads the whole answer.
func forward(req *http.Request, target string) (*http.Response, []byte, error) {
	out, err := http.NewRequestWithContext(req.Context(), req.Method, target+req.URL.RequestURI(), req.Body)
	if err != nil {
		return nil, nil, fmt.Errorf("forward: %w", err)
	}
	out.Header = req.Header.Clone()
	resp, err := http.DefaultTransport.RoundTrip(out)
	if err != nil {
		return nil, nil, fmt.Errorf("forward to %s: %w", target, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, nil, fmt.Errorf("forward: reading %s's answer: %w", target, err)
	}
	return resp, body, nil
}

// writeLimits writes a router configuration file holding the request
// limits the way the operator's ConfigMap does, and returns its path.
func writeLimits(t *testing.T, conc, queue int32, overflow int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	cfg := fmt.Sprintf("strategy: prefixaware\nrequestLimits:\n  maxConcurrentRequests: %d\n  maxQueueSize: %d\n  overflowStatusCode: %d\n", conc, queue, overflow)
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// driven is what the clients got.
type driven struct {
	sent, completed, rejected int
	bad                       []string // answers neither a completion nor the router's overflow error
}

// drive runs perRouter clients against each router at once, each sending
// n requests one after another, and sorts the answers: a completion, the
// router's overflow error with status overflow, or anything else (bad).
func drive(t *testing.T, rs []*router, overflow, perRouter, n int) driven {
	t.Helper()
	var mu sync.Mutex
	var res driven
	var wg sync.WaitGroup
	client := &http.Client{Timeout: 2 * time.Minute}
	for i := range perRouter * len(rs) {
		r := rs[i%len(rs)]
		wg.Go(func() {
			for j := range n {
				status, body, err := complete(client, r.url, fmt.Sprintf("client %d request %d", i, j))
				mu.Lock()
				res.sent++
				switch {
				case err != nil:
					res.bad = append(res.bad, fmt.Sprintf("%s: %v", r.url, err))
				case status == http.StatusOK && bytes.Contains(body, []byte(`"choices"`)):
					res.completed++
				case status == overflow && overflowError(status, body):
					res.rejected++
				default:
					res.bad = append(res.bad, fmt.Sprintf("%s: %d %.300s", r.url, status, body))
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return res
}

// complete posts one short completion and reads its answer.
func complete(c *http.Client, base, prompt string) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	body := fmt.Sprintf(`{"model":%q,"prompt":%q,"max_tokens":16}`, simModel, prompt)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/completions", strings.NewReader(body))
	if err != nil {
		return 0, nil, fmt.Errorf("complete: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("complete: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, nil, fmt.Errorf("complete: reading the answer: %w", err)
	}
	return resp.StatusCode, b, nil
}

// overflowError reports whether an answer is the router's over-capacity
// error: 429 or 503 with an OpenAI error body carrying the same code.
func overflowError(status int, body []byte) bool {
	if status != http.StatusTooManyRequests && status != http.StatusServiceUnavailable {
		return false
	}
	var e struct {
		Error struct {
			Message string `json:"message"`
			Code    int    `json:"code"`
		} `json:"error"`
	}
	return json.Unmarshal(body, &e) == nil && e.Error.Code == status && e.Error.Message != ""
}
