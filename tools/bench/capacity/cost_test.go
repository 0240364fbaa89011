package capacity

import (
	"bytes"
	"strings"
	"testing"
)

func curve(strategy, cache string, rps, gpuSec float64, o Outcome) Curve {
	c := Curve{Workload: "w", Workers: 8, SLOms: 2000, Strategy: strategy, Cache: cache, Search: &Search{Outcome: o}}
	if rps > 0 {
		c.Goodput = Probe{Factor: 1, OfferedRPS: rps, GPUSecondsPer1K: gpuSec, Pass: true}
	}
	return c
}

func TestRowsAndGoal(t *testing.T) {
	base := Baselines{Strategy: "roundrobin", GPU: "GPU", WithL1: "GPU+L1"}
	price := Price{USDPerGPUHour: 3.6}
	for _, tc := range []struct {
		name     string
		curves   []Curve
		wantBest string
		wantX    float64 // 0: no ratio
		met      bool
	}{
		{"warmpath doubles goodput", []Curve{
			curve("roundrobin", "GPU", 2, 10, Bracketed), curve("roundrobin", "GPU+L1", 2.5, 8, Bracketed),
			curve("kvaware", "GPU", 3, 6.6, Bracketed), curve("kvaware", "GPU+L1", 4, 5, Bracketed),
		}, "kvaware / GPU+L1", 2, true},
		{"short of the target", []Curve{
			curve("roundrobin", "GPU", 2, 10, Bracketed), curve("kvaware", "GPU", 2.6, 7.7, Bracketed),
		}, "kvaware / GPU", 1.3, false},
		{"baseline meets no load", []Curve{
			curve("roundrobin", "GPU", 0, 0, Unattainable), curve("kvaware", "GPU", 1, 20, Bracketed),
		}, "kvaware / GPU", 0, true},
		{"nothing meets the SLO", []Curve{
			curve("roundrobin", "GPU", 0, 0, Unattainable), curve("kvaware", "GPU", 0, 0, Unattainable),
		}, "kvaware / GPU", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rows := Rows(tc.curves, price, base)
			g := CheckGoal(rows, nil, "w", 8, 2000, 1.4, base)
			if g.Best != tc.wantBest || g.Met != tc.met {
				t.Fatalf("%+v: want best %q, met %v", g, tc.wantBest, tc.met)
			}
			if (g.X == nil) != (tc.wantX == 0) || (g.X != nil && *g.X != tc.wantX) {
				t.Fatalf("%+v: want ratio %g", g, tc.wantX)
			}
			var md bytes.Buffer
			if err := Markdown(&md, rows); err != nil || strings.Count(md.String(), "\n") != len(rows)+2 {
				t.Fatalf("markdown %q, %v", md.String(), err)
			}
		})
	}
	rows := Rows([]Curve{curve("roundrobin", "GPU", 2, 10, Bracketed), curve("kvaware", "GPU", 4, 5, Bracketed)}, price, base)
	// 5 GPU-seconds per 1K tokens at $3.60 an hour is half a cent.
	if rows[1].USDPer1K != 0.005 || *rows[1].CostPctvsRRGPU != -50 || rows[1].GoodputXvsRRL1 != nil {
		t.Fatalf("%+v", rows[1])
	}
}

func TestHeadline(t *testing.T) {
	base := Baselines{Strategy: "roundrobin", GPU: "GPU", WithL1: "GPU+L1"}
	for _, tc := range []struct {
		name   string
		curves []Curve
		bounds []OracleBound
		want   []string // in the line of the one group
	}{
		{"warmpath doubles goodput", []Curve{
			curve("roundrobin", "GPU", 2, 10, Bracketed), curve("kvaware", "GPU+L1+L2", 4, 5, Bracketed), curve("kvaware", "GPU", 3, 6.6, Bracketed),
		}, []OracleBound{{Workload: "w", Workers: 8, SLOms: 2000, SLOAttainable: true, GoodputRPS: 16, GoodputTokS: 1600}},
			[]string{"| 2.00 req/s |", "kvaware / GPU+L1+L2", "4.00 req/s", "2.00×", "-50%", "| 16.00 req/s (1600 tok/s) | 25% |"}},
		{"round robin meets no load", []Curve{
			curve("roundrobin", "GPU", 0, 0, Unattainable), curve("prefixaware", "GPU+L1", 1, 20, Bracketed),
		}, []OracleBound{{Workload: "w", Workers: 8, SLOms: 2000, AloneTTFTP90ms: 2100, ThroughputRPS: 16}},
			[]string{"meets no load", "prefixaware / GPU+L1", "unbounded", "SLO is out of reach (oracle alone: p90 2100 ms) | – |"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			if err := Headline(&b, Rows(tc.curves, Price{USDPerGPUHour: 3.6}, base), tc.bounds, base); err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSpace(b.String()), "\n")
			if len(lines) != 3 {
				t.Fatalf("%d lines, want a header, a rule and one group:\n%s", len(lines), b.String())
			}
			for _, w := range tc.want {
				if !strings.Contains(lines[2], w) {
					t.Errorf("%q lacks %q", lines[2], w)
				}
			}
		})
	}
}

// TestBestAgrees holds the goal and the README to one best row: equal
// goodput goes to the lower TTFT p90, then to the name.
func TestBestAgrees(t *testing.T) {
	base := Baselines{Strategy: "roundrobin", GPU: "GPU", WithL1: "GPU+L1"}
	at := func(strategy, cache string, rps, p90 float64) Curve {
		c := curve(strategy, cache, rps, 5, Bracketed)
		c.Goodput.TTFTP90ms = p90
		return c
	}
	for _, tc := range []struct {
		name   string
		curves []Curve
		want   string
	}{
		{"most goodput", []Curve{at("roundrobin", "GPU", 9, 100), at("kvaware", "GPU", 7, 1900), at("prefixaware", "GPU", 7.5, 1990)}, "prefixaware / GPU"},
		{"tie to the lower p90", []Curve{at("roundrobin", "GPU", 6, 100), at("kvaware", "GPU", 7.33, 1957), at("kvaware", "GPU+L1", 7.33, 1857),
			at("kvaware", "GPU+L1+L2", 7.33, 1766)}, "kvaware / GPU+L1+L2"},
		{"then to the name", []Curve{at("roundrobin", "GPU", 6, 100), at("prefixaware", "GPU", 7, 1800), at("kvaware", "GPU+L1", 7, 1800)}, "kvaware / GPU+L1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rows := Rows(tc.curves, Price{USDPerGPUHour: 3.6}, base)
			if g := CheckGoal(rows, nil, "w", 8, 2000, 1.4, base); g.Best != tc.want {
				t.Errorf("goal names %q, want %q", g.Best, tc.want)
			}
			var b strings.Builder
			if err := Headline(&b, rows, nil, base); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(b.String(), "| "+tc.want+" |") {
				t.Errorf("headline does not name %q:\n%s", tc.want, b.String())
			}
		})
	}
}
