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
