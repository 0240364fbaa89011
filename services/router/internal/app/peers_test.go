package app

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/warmpath/warmpath/services/router/internal/discovery"
	"github.com/warmpath/warmpath/services/router/internal/limiter"
	"github.com/warmpath/warmpath/services/router/strategy"
)

// TestPeerCountReachesStrategy: the number of router replicas peer
// discovery reports sets the share of each worker's cache the strategy
// models, and a strategy a reload builds keeps it. No worker is needed:
// the app is built, not run, and the strategy is asked directly.
func TestPeerCountReachesStrategy(t *testing.T) {
	path := filepath.Join(t.TempDir(), "routing.yaml")
	// 3000 tokens × 4 bytes / 128 = 94 chunks alone, 32 as one of three.
	write := func(conf string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("strategy: prefixaware\nprefixAware:\n  fallbackCapacityTokens: 3000\n")
	src, err := discovery.Static([]string{"http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	self := "http://10.0.0.1:8080"
	peerSrc, err := discovery.Static([]string{self})
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(t.Context(), Options{Discovery: src, Peers: peerSrc, PeerSelf: self, ConfigPath: path, Limits: limiter.Config{MaxQueue: 1024}})
	if err != nil {
		t.Fatal(err)
	}
	modelled := func() int {
		t.Helper()
		s := a.server.Routing().Strategy
		if _, err := s.Pick(&strategy.Request{Model: "m", Prompt: "a prompt"}, []strategy.Endpoint{{ID: "w"}}); err != nil {
			t.Fatal(err)
		}
		return s.(strategy.Inspector).CacheKnowledge()["w"].CapacityChunks
	}
	steps := []struct {
		name   string
		peers  []string
		reload string
		want   int
	}{
		{name: "before any peer update", want: 94},
		{name: "three replicas", peers: []string{self, "http://10.0.0.2:8080", "http://10.0.0.3:8080"}, want: 32},
		{name: "reload builds a new strategy", reload: "strategy: prefixaware\nprefixAware:\n  fallbackCapacityTokens: 3000\n  chunkSize: 128\nloadGuard:\n  window: 3\n", want: 32},
		{name: "reload to session", reload: "strategy: session\nprefixAware:\n  fallbackCapacityTokens: 3000\n", want: 32},
		{name: "alone again", peers: []string{self}, want: 94},
	}
	for _, st := range steps {
		if st.peers != nil {
			var ts []discovery.Target
			for _, u := range st.peers {
				ts = append(ts, discovery.Target{URL: u})
			}
			a.setPeers(ts)
		}
		if st.reload != "" {
			before := a.server.Routing().Strategy
			write(st.reload)
			if err := a.Reload(); err != nil {
				t.Fatal(err)
			}
			if a.server.Routing().Strategy == before {
				t.Fatalf("%s: the reload kept the strategy, so it tests nothing", st.name)
			}
		}
		if got := modelled(); got != st.want {
			t.Errorf("%s: strategy models %d chunks of a worker, want %d", st.name, got, st.want)
		}
	}
}
