package capacity

import (
	"testing"
	"time"

	"github.com/warmpath/warmpath/tools/bench/des"
	"github.com/warmpath/warmpath/tools/bench/workload"
)

// records are n requests a second apart, each waiting delay(i) seconds
// for its first scheduling and 0.1 s more for its first token.
func records(n int, delay func(i int) float64) []des.Record {
	out := make([]des.Record, n)
	for i := range out {
		a := float64(i)
		s := a + delay(i)
		out[i] = des.Record{Worker: "w", Arrival: a, Scheduled: s, FirstToken: s + 0.1, Finished: s + 1, Out: 10}
	}
	return out
}

func TestQueueGrowth(t *testing.T) {
	limit := time.Second
	for _, tc := range []struct {
		name  string
		delay func(i int) float64
		grows bool
	}{
		{"no queue", func(int) float64 { return 0 }, false},
		{"steady queue", func(int) float64 { return 2 }, false},
		{"queue draining as caches warm", func(i int) float64 { return 3 - float64(i)/10 }, false},
		{"growth within the limit", func(i int) float64 { return float64(i) / 50 }, false},
		{"queue growing with every arrival", func(i int) float64 { return float64(i) / 10 }, true},
		{"late burst", func(i int) float64 {
			if i >= 20 {
				return 5
			}
			return 0
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := QueueGrowth(records(30, tc.delay))
			if got := g.Grows(limit); got != tc.grows {
				t.Fatalf("%+v: grows %v, want %v", g, got, tc.grows)
			}
		})
	}
}

func TestQueueGrowthOrdersByArrivalAndSkipsRejected(t *testing.T) {
	recs := records(30, func(i int) float64 { return float64(i) / 10 })
	// Out of arrival order, and a refused request with a huge delay.
	recs[0], recs[29] = recs[29], recs[0]
	recs = append(recs, des.Record{Worker: "w", Arrival: 0, Scheduled: 0, Rejected: "too long"})
	g := QueueGrowth(recs)
	if g.FirstThirdMs != 450 || g.LastThirdMs != 2450 {
		t.Fatalf("%+v, want first third 450 ms, last third 2450 ms", g)
	}
	if (Growth{}) != QueueGrowth(records(2, func(int) float64 { return 9 })) {
		t.Fatal("two requests have no thirds to compare")
	}
}

func TestMeasure(t *testing.T) {
	slo := SLO{TTFTP90: 500 * time.Millisecond, QueueGrowth: 250 * time.Millisecond}
	for _, tc := range []struct {
		name   string
		delay  func(i int) float64
		pass   bool
		p90    float64
		within float64 // req/s whose own TTFT met the SLO, over 9 s of arrivals
	}{
		{"fast", func(int) float64 { return 0 }, true, 100, 1.11},
		{"slow but steady", func(int) float64 { return 0.5 }, false, 600, 0},
		// Thirds of 3 requests: the queue grows 70 ms, under the limit.
		{"slowly growing queue", func(i int) float64 { return float64(i) / 100 }, true, 180, 1.11},
		{"half served late", func(i int) float64 { return float64(i / 5) }, false, 1100, 0.56},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := Measure(records(10, tc.delay), 4, slo)
			if p.Pass != tc.pass || p.TTFTP90ms != tc.p90 || p.WithinSLORPS != tc.within {
				t.Fatalf("%+v: pass %v p90 %g within %g, want %v %g %g", p, p.Pass, p.TTFTP90ms, p.WithinSLORPS, tc.pass, tc.p90, tc.within)
			}
		})
	}
	p := Measure(records(10, func(int) float64 { return 0 }), 4, slo)
	// 10 requests over 9 s of arrivals and 10 s of makespan, 100 tokens.
	if p.OfferedRPS != 1.11 || p.OutputTokS != 11.11 || p.GPUSecondsPer1K != 360 || p.MakespanS != 10 {
		t.Fatalf("%+v: want 1.11 req/s, 11.11 tok/s, 360 GPU-s per 1K tokens over 9 s, makespan 10 s", p)
	}
	growing := Measure(records(30, func(i int) float64 { return float64(i) / 50 }), 4,
		SLO{TTFTP90: time.Minute, QueueGrowth: 100 * time.Millisecond})
	if growing.Pass {
		t.Fatalf("%+v: a growing queue passed", growing)
	}
}

func TestCompress(t *testing.T) {
	reqs := []workload.Request{{Arrival: 4 * time.Second, After: -1}, {Arrival: 4 * time.Second, After: 0, Think: 2 * time.Second}}
	got := Compress(reqs, 4)
	if got[0].Arrival != time.Second || got[1].Think != 500*time.Millisecond || got[1].After != 0 {
		t.Fatalf("%+v", got)
	}
	if reqs[0].Arrival != 4*time.Second {
		t.Fatal("Compress changed its input")
	}
}
