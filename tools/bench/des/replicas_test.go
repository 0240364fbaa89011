package des

import (
	"testing"

	"github.com/warmpath/warmpath/services/router/strategy"
	"github.com/warmpath/warmpath/tools/bench/workload"
)

// TestReplicaShare: relaying replicas (Forward) model a 1/Routers share of
// each worker's cache, as the router's --peers does; replicas that route
// alone, and a lone router, model the whole cache.
func TestReplicaShare(t *testing.T) {
	// 2048 GPU blocks × 16 tokens × 4 bytes / 128 = 1024 chunks; a third
	// is ceil(341.3).
	reqs := []workload.Request{{Parts: [][]uint32{make([]uint32, 256)}, MaxTokens: 1, After: -1}}
	for _, tt := range []struct {
		name    string
		routers int
		forward bool
		want    int
	}{
		{"one router", 1, true, 1024},
		{"three relaying", 3, true, 342},
		{"three alone", 3, false, 1024},
	} {
		t.Run(tt.name, func(t *testing.T) {
			sc := strategy.Defaults()
			sc.Name = strategy.NamePrefixAware
			s, err := newSim(Config{Workers: 2, NumGPUBlocks: 2048, Strategy: sc, Model: "m", Routers: tt.routers, Forward: tt.forward}, reqs)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.run(); err != nil {
				t.Fatal(err)
			}
			r := s.routers[s.routedBy[0]]
			for id, k := range r.strategy.(strategy.Inspector).CacheKnowledge() {
				if k.CapacityChunks != tt.want {
					t.Errorf("%s modelled at %d chunks, want %d", id, k.CapacityChunks, tt.want)
				}
			}
			if len(r.strategy.(strategy.Inspector).CacheKnowledge()) == 0 {
				t.Fatal("the replica that routed the request learnt nothing")
			}
		})
	}
}

// TestPeerPoll: relaying replicas learn the others' in-flight requests per
// worker every PeerLoadSeconds, as the router's peerload does, on top of
// what the scrape finds beyond every replica's requests; replicas that
// route alone, or with peer polling off, have only the scrape.
func TestPeerPoll(t *testing.T) {
	for _, tt := range []struct {
		name     string
		forward  bool
		peerLoad float64
		polls    bool
	}{
		{"relaying", true, 0, true},
		{"relaying, polling off", true, -1, false},
		{"alone", false, 0, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			sc := strategy.Defaults()
			sc.Name = strategy.NamePrefixAware
			s, err := newSim(Config{Workers: 2, NumGPUBlocks: 2048, Strategy: sc, Model: "m", Routers: 3, Forward: tt.forward, PeerLoadSeconds: tt.peerLoad}, nil)
			if err != nil {
				t.Fatal(err)
			}
			s.routers[1].inFlight[0], s.routers[2].inFlight[0], s.routers[2].inFlight[1] = 2, 3, 1
			s.routers[0].inFlight[1] = 4 // its own: never a peer's
			s.peerPoll()
			want := []int{0, 0}
			if tt.polls {
				want = []int{5, 1}
			}
			if s.peerLoadSeconds() > 0 != tt.polls {
				t.Errorf("peerLoadSeconds %v, want polling %v", s.peerLoadSeconds(), tt.polls)
			}
			if !tt.polls {
				return // newSim queued no poll; peerPoll is the router's only with peers
			}
			for j, w := range want {
				if got := s.routers[0].external[j]; got != w {
					t.Errorf("worker %d: replica 0 counts %d external, want %d", j, got, w)
				}
			}
			// The scrape adds only what no replica accounts for: here the
			// engines are idle, so nothing.
			s.scrape()
			if got := s.routers[0].unexplained; got[0] != 0 || got[1] != 0 {
				t.Errorf("unexplained %v, want none (every request is a replica's)", got)
			}
			if got := s.routers[0].external[0]; got != 5 {
				t.Errorf("after a scrape: external %d, want the peers' 5 kept", got)
			}
		})
	}
}
