package des_test

import (
	"testing"

	"github.com/warmpath/warmpath/services/router/strategy"
	"github.com/warmpath/warmpath/tools/bench/des"
)

// TestOracleBoundHoldsUnderOverload floods a fleet, so that it is busy
// from first arrival to last finish: no strategy may then carry more
// requests per second than the bound allows.
func TestOracleBoundHoldsUnderOverload(t *testing.T) {
	reqs := sharedPrefix(t)
	for i := range reqs {
		reqs[i].Arrival /= 100
	}
	for _, name := range []string{strategy.NameRoundRobin, strategy.NameKVAware} {
		t.Run(name, func(t *testing.T) {
			cfg := fleet(name, 4)
			res, err := des.Run(cfg, reqs)
			if err != nil {
				t.Fatal(err)
			}
			b, err := des.OracleBound(cfg, reqs, res)
			if err != nil {
				t.Fatal(err)
			}
			if b.Requests != len(reqs) || b.WorkerSeconds <= 0 || b.HitRate <= 0 {
				t.Fatalf("bound %+v for %d requests", b, len(reqs))
			}
			first, last := res.Records[0].Arrival, 0.0
			for _, r := range res.Records {
				first, last = min(first, r.Arrival), max(last, r.Finished)
			}
			carried := float64(len(reqs)) / (last - first)
			bound := float64(cfg.Workers*b.Requests) / b.WorkerSeconds
			t.Logf("carried %.1f req/s, bound %.1f req/s (%.0f%%), oracle hit rate %.3f", carried, bound, 100*carried/bound, b.HitRate)
			if carried > bound {
				t.Errorf("carried %.2f req/s, over the bound %.2f", carried, bound)
			}
		})
	}
}
