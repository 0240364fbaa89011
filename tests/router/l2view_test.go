package router

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warmpath/warmpath/libs/blockhash"
	"github.com/warmpath/warmpath/libs/kvevents"
	"github.com/warmpath/warmpath/libs/kvevents/kvzmq"
	"github.com/warmpath/warmpath/libs/testnet"
)

// TestKVAwareCreditsTheL2View wires a fake cache server (a silent event
// publisher and a snapshot naming a prompt's chunks) into a kvaware
// router: once a request named the model, the router follows the model's
// chunks, shows them under /debug/endpoints' "l2" and credits them as L2
// blocks to the worker it picks.
func TestKVAwareCreditsTheL2View(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pub, err := kvzmq.NewPublisher(ctx, kvzmq.Config{Endpoint: "tcp://*:0", HWM: 1000, BufferSteps: 10, MaxQueueSize: 10}, kvevents.MapEncoding, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	var mu sync.Mutex
	var hashes []string
	snap := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/kv-events/snapshot" || r.URL.Query().Get("model") != simModel {
			http.NotFound(w, r)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		_ = json.NewEncoder(w).Encode(map[string]any{"seq": -1, "hashes": append([]string{}, hashes...)})
	}))
	defer snap.Close()
	port := pub.Addr().String()[strings.LastIndexByte(pub.Addr().String(), ':')+1:]

	w := startEventWorker(t, testnet.FreePortRun(t, 3, nil), "map", "--time-scale", "20")
	r := startRouter(t, []*worker{w}, append(kvEvents(), "--strategy", "kvaware",
		"--l2-events-endpoints", "tcp://127.0.0.1:"+port, "--l2-snapshot-urls", snap.URL, "--l2-hash-seed", "0", "--l2-chunk-tokens", "256")...)

	// The L2 holds the chunks of this prompt, as LMCache keys them.
	var prompt strings.Builder
	for i := 0; prompt.Len() < 6000; i++ {
		fmt.Fprintf(&prompt, "contract clause %d: the L2 holds this. ", i)
	}
	resp, body := post(t, w.url+"/tokenize", fmt.Sprintf(`{"model":%q,"prompt":%q}`, simModel, prompt.String()))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("tokenize: %d %s", resp.StatusCode, body)
	}
	var tok struct {
		Tokens []uint32 `json:"tokens"`
	}
	if err := json.Unmarshal(body, &tok); err != nil {
		t.Fatal(err)
	}
	h, err := blockhash.New("0")
	if err != nil {
		t.Fatal(err)
	}
	chain := h.Chain(tok.Tokens, 256, nil)
	if len(chain) < 2 {
		t.Fatalf("prompt of %d tokens: too short", len(tok.Tokens))
	}
	mu.Lock()
	for _, c := range chain {
		hashes = append(hashes, hex.EncodeToString(c[:]))
	}
	mu.Unlock()

	// A first request names the model; the router then fetches its snapshot.
	if resp, body := post(t, r.url+"/v1/completions", fmt.Sprintf(`{"model":%q,"prompt":"hello there","max_tokens":1}`, simModel)); resp.StatusCode != http.StatusOK {
		t.Fatalf("warm-up: %d %s", resp.StatusCode, body)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var d struct {
			L2 struct {
				Servers []struct {
					Connected bool `json:"connected"`
					Chunks    int  `json:"chunks"`
				} `json:"servers"`
			} `json:"l2"`
		}
		body := r.get(t, "/debug/endpoints")
		if err := json.Unmarshal(body, &d); err != nil {
			t.Fatal(err)
		}
		if len(d.L2.Servers) == 1 && d.L2.Servers[0].Connected && d.L2.Servers[0].Chunks == len(chain) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/debug/endpoints l2: %s", body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if resp, body := post(t, r.url+"/v1/completions", fmt.Sprintf(`{"model":%q,"prompt":%q,"max_tokens":1}`, simModel, prompt.String())); resp.StatusCode != http.StatusOK {
		t.Fatalf("completion: %d %s", resp.StatusCode, body)
	}
	got := scrape(t, r.url+"/metrics", `warmpath_router_credited_blocks_total{strategy="kvaware",tier="l2"}`)
	if want := float64(len(chain) * 256 / 16); got != want {
		t.Errorf("L2 blocks credited = %v, want %v (the prompt's chunks in 16-token blocks)", got, want)
	}
	if got := scrape(t, r.url+"/metrics", "warmpath_router_l2_chunks"); got != float64(len(chain)) {
		t.Errorf("warmpath_router_l2_chunks = %v, want %d", got, len(chain))
	}
}
