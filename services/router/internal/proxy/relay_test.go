package proxy

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/warmpath/warmpath/services/router/strategy"
)

// ownerOfAll is a peer set in which this replica owns every request and
// every address is a peer's.
type ownerOfAll struct{ self string }

func (o ownerOfAll) Owner(uint64) (string, bool) { return o.self, true }
func (ownerOfAll) IsPeer(net.IP) bool            { return true }

// TestRelayMarkNeverReachesAWorker: a request another replica relayed here
// carries forwardedHeader; it is routed here and the header is removed
// before the worker sees it, whatever the strategy (round robin, which is
// never relayed onwards, included).
func TestRelayMarkNeverReachesAWorker(t *testing.T) {
	for _, name := range []string{strategy.NamePrefixAware, strategy.NameRoundRobin} {
		t.Run(name, func(t *testing.T) {
			got := make(chan string, 1)
			worker := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				got <- r.Header.Get(forwardedHeader)
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write([]byte(`{"ok":true}`))
			}))
			t.Cleanup(worker.Close)
			sc := strategy.Defaults()
			sc.Name = name
			router := startProxyRouting(t, worker.URL, Config{Peers: ownerOfAll{"http://10.0.0.1:8080"}, PeerSelf: "http://10.0.0.1:8080"}, sc)
			req, err := http.NewRequest(http.MethodPost, router+"/v1/completions", strings.NewReader(`{"model":"m","prompt":"hello"}`))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set(forwardedHeader, "http://10.0.0.2:8080")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d", resp.StatusCode)
			}
			if h := <-got; h != "" {
				t.Errorf("the worker got %s: %q", forwardedHeader, h)
			}
		})
	}
}
