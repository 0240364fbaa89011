package strategy

import (
	"fmt"
	"sync"
	"testing"

	"github.com/warmpath/warmpath/services/router/kvindex"
)

// TestConcurrentPicks runs Picks, Forgets and CacheKnowledge in parallel
// on every strategy; run with -race.
func TestConcurrentPicks(t *testing.T) {
	for _, name := range Names {
		t.Run(name, func(t *testing.T) {
			c := Defaults()
			c.Name = name
			c.PrefixAware.FallbackCapacityTokens = 4000 // small, so eviction runs too
			s, err := New(c, WithIndex(kvindex.New(1<<12)))
			if err != nil {
				t.Fatal(err)
			}
			sys := longText(1, 2048)
			var wg sync.WaitGroup
			for w := range 8 {
				wg.Go(func() {
					e := eps(0, 1, 2, 3, 4, 5)
					e[w%len(e)].NumGPUBlocks, e[w%len(e)].BlockSize = 100+w, 16 // resizes race with picks
					for i := range 300 {
						req := &Request{Model: "m", Prompt: sys + longText(uint64(w*1000+i), 300)}
						if i%2 == 0 {
							req.TokenIDs = tokenIDs(uint64(i%5), 256)
						}
						if i%3 == 0 {
							req.SessionKey = fmt.Sprintf("s%d", i%17)
						}
						d, err := s.Pick(req, e)
						if err != nil {
							t.Error(err)
							return
						}
						if d.Endpoint == "" {
							t.Error("empty Decision.Endpoint")
							return
						}
						if f, ok := s.(Forgetter); ok && i%50 == 0 {
							f.Forget(e[i%len(e)].ID)
						}
						if in, ok := s.(Inspector); ok && i%40 == 0 {
							_ = in.CacheKnowledge()
						}
					}
				})
			}
			wg.Wait()
		})
	}
}
