package capacity

import (
	"strings"
	"testing"
	"time"

	"github.com/warmpath/warmpath/tools/bench/des"
)

func TestOracleBound(t *testing.T) {
	// 10 requests of 100 output tokens in 5 engine-seconds: 0.5 s each,
	// so 8 workers serve at most 16 req/s, 1,600 tok/s.
	b := des.Bound{Requests: 10, OutputTokens: 1000, WorkerSeconds: 5, TTFTP90: time.Second, Steps: 40}
	for _, tc := range []struct {
		name          string
		slo           time.Duration
		attainable    bool
		goodput, toks float64
		goalPct       string // the goal's best at % of the bound, for a best of 4 req/s
	}{
		{"SLO above the oracle's alone p90", 2 * time.Second, true, 16, 1600, "25"},
		{"SLO at it", time.Second, true, 16, 1600, "25"},
		{"SLO below it: no load meets it", 500 * time.Millisecond, false, 0, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := Workload{Name: "w", Workers: 8, SLO: SLO{TTFTP90: tc.slo}}
			o := newOracleBound(w, "GPU+L1+L2", b)
			if o.ThroughputRPS != 16 || o.ThroughputTokS != 1600 || o.EngineSecondsPerRequest != 0.5 {
				t.Errorf("throughput bound %+v, want 16 req/s, 1600 tok/s, 0.5 s a request", o)
			}
			if o.SLOAttainable != tc.attainable || o.GoodputRPS != tc.goodput || o.GoodputTokS != tc.toks {
				t.Errorf("goodput bound %+v, want attainable %v, %g req/s, %g tok/s", o, tc.attainable, tc.goodput, tc.toks)
			}
			base := Baselines{Strategy: "roundrobin", GPU: "GPU", WithL1: "GPU+L1"}
			slo := ms(tc.slo)
			c := func(strategy string, rps float64) Curve {
				return Curve{Workload: "w", Workers: 8, SLOms: slo, Strategy: strategy, Cache: "GPU", Goodput: Probe{OfferedRPS: rps, GPUSecondsPer1K: 5, Pass: true}}
			}
			rows := Rows([]Curve{c("roundrobin", 2), c("kvaware", 4)}, Price{USDPerGPUHour: 3.6}, base)
			g := CheckGoal(rows, []OracleBound{o}, "w", 8, slo, 1.4, base)
			got := ""
			if g.BestPctOfBound != nil {
				got = strings.TrimSuffix(pctText(g.BestPctOfBound), "%")
			}
			if g.BoundRPS != tc.goodput || got != tc.goalPct {
				t.Errorf("goal %+v: want bound %g, best at %q%%", g, tc.goodput, tc.goalPct)
			}
			var md strings.Builder
			if err := BoundsMarkdown(&md, rows, []OracleBound{o}, base); err != nil || strings.Count(md.String(), "\n") != 3 {
				t.Errorf("bounds table %q, %v", md.String(), err)
			}
		})
	}
}
