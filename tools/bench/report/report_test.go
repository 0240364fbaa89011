package report_test

import (
	"bytes"
	"image/png"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/warmpath/warmpath/tools/bench/report"
)

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

func run(name string, ttfts []int, perWorker map[string]float64) report.Run {
	r := report.Run{Name: name, Workload: "w", Makespan: 10 * time.Second, HitRate: math.NaN(), OracleHitRate: 0.8, PerWorker: perWorker}
	for _, t := range ttfts {
		r.Samples = append(r.Samples, report.Sample{TTFT: ms(t), E2E: ms(t + 100), MeanITL: ms(10),
			PromptTokens: 100, CachedTokens: 40, OutputTokens: 50})
	}
	r.Samples = append(r.Samples, report.Sample{Failed: true, TTFT: ms(99999)})
	return r
}

func TestSummarize(t *testing.T) {
	s := report.Summarize(run("a", []int{10, 20, 30, 40, 50, 60, 70, 80, 90, 100}, map[string]float64{"x": 6, "y": 2}))
	want := report.Summary{Name: "a", Workload: "w", Requests: 11, Errors: 1, TTFTP50ms: 50, TTFTP90ms: 90, TTFTP99ms: 100,
		ITLms: 10, E2EP50ms: 150, ThroughputTokS: 50, HitRate: 0.4, OracleHitRate: 0.8, OfOracle: 0.5, Imbalance: 1.5}
	got := s
	if got.Name != want.Name || got.Requests != want.Requests || got.Errors != want.Errors ||
		got.TTFTP50ms != want.TTFTP50ms || got.TTFTP90ms != want.TTFTP90ms || got.TTFTP99ms != want.TTFTP99ms ||
		got.ITLms != want.ITLms || got.E2EP50ms != want.E2EP50ms || got.ThroughputTokS != want.ThroughputTokS ||
		got.HitRate != want.HitRate || got.OfOracle != want.OfOracle || got.Imbalance != want.Imbalance {
		t.Fatalf("summary\n got %+v\nwant %+v", got, want)
	}
	// A measured hit rate wins over the samples'.
	r := run("b", []int{1}, nil)
	r.HitRate = 0.7
	if s := report.Summarize(r); s.HitRate != 0.7 || s.Imbalance != 0 {
		t.Fatalf("hit rate %v imbalance %v, want 0.7 and 0 without per-worker counts", s.HitRate, s.Imbalance)
	}
}

func TestCompareAgainstBaselineOfTheSameWorkload(t *testing.T) {
	sums := []report.Summary{
		{Name: "base", Workload: "w", TTFTP50ms: 100, TTFTP90ms: 200, ThroughputTokS: 50},
		{Name: "fast", Workload: "w", TTFTP50ms: 28, TTFTP90ms: 120, ThroughputTokS: 62},
		{Name: "base", Workload: "v", TTFTP50ms: 10, TTFTP90ms: 10, ThroughputTokS: 10},
		{Name: "fast", Workload: "v", TTFTP50ms: 5, TTFTP90ms: 20, ThroughputTokS: 10},
	}
	report.Compare(sums, "base")
	tests := []struct {
		i              int
		p50, p90, tput float64
	}{{0, 0, 0, 0}, {1, -72, -40, 24}, {3, -50, 100, 0}}
	for _, tt := range tests {
		s := sums[tt.i]
		if s.TTFTP50ChangePct != tt.p50 || s.TTFTP90ChangePct != tt.p90 || s.ThroughputChangePct != tt.tput {
			t.Errorf("row %d: changes %v %v %v, want %v %v %v", tt.i, s.TTFTP50ChangePct, s.TTFTP90ChangePct, s.ThroughputChangePct, tt.p50, tt.p90, tt.tput)
		}
	}
}

func TestPercentile(t *testing.T) {
	d := []time.Duration{1, 2, 3, 4}
	for _, tt := range []struct {
		p    float64
		want time.Duration
	}{{0, 1}, {25, 1}, {50, 2}, {75, 3}, {99, 4}, {100, 4}} {
		if got := report.Percentile(d, tt.p); got != tt.want {
			t.Errorf("p%v = %v, want %v", tt.p, got, tt.want)
		}
	}
	if report.Percentile(nil, 50) != 0 {
		t.Error("percentile of nothing is not 0")
	}
}

func TestTableMarkdownAndPlots(t *testing.T) {
	runs := []report.Run{run("roundrobin", []int{100, 200, 300}, map[string]float64{"x": 1, "y": 1}),
		run("kvaware", []int{10, 20, 30}, map[string]float64{"x": 2, "y": 0})}
	sums := []report.Summary{report.Summarize(runs[0]), report.Summarize(runs[1])}
	report.Compare(sums, "roundrobin")
	var tb, md bytes.Buffer
	if err := report.Table(&tb, sums); err != nil {
		t.Fatal(err)
	}
	if err := report.Markdown(&md, sums, "roundrobin"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"kvaware", "-90%", "40.0%", "2.00"} {
		if !strings.Contains(tb.String(), want) || !strings.Contains(md.String(), want) {
			t.Errorf("table or markdown lacks %q:\n%s\n%s", want, tb.String(), md.String())
		}
	}
	paths, err := report.Plots(t.TempDir()+"/plots", "w", runs, sums)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(f)
		f.Close()
		if err != nil || img.Bounds().Dx() < 500 {
			t.Errorf("%s: not a plot (%v)", p, err)
		}
	}
}

func TestResultsSection(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(dir+"/x.json", []byte(`{"goal_met": true, "ratio": 1.5, "environment": {"cores": 2},
		"results": [{"strategy": "kvaware", "hit_rate": 0.9}, {"strategy": "roundrobin", "hit_rate": 0.2, "extra": "a|b"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	md, err := report.RenderResults(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| ratio | 1.5 |", "| environment.cores | 2 |", "| hit_rate | strategy | extra |", "| 0.2 | roundrobin | a\\|b |"} {
		if !strings.Contains(md, want) {
			t.Errorf("rendered results lack %q:\n%s", want, md)
		}
	}
	doc := dir + "/page.md"
	if err := os.WriteFile(doc, []byte("# Page\n\nprose\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for range 2 { // the second run replaces the first's section
		if err := report.UpdateDoc(doc, md); err != nil {
			t.Fatal(err)
		}
	}
	b, _ := os.ReadFile(doc)
	if got := string(b); strings.Count(got, report.ResultsBegin) != 1 || !strings.HasPrefix(got, "# Page\n\nprose\n") || !strings.Contains(got, "| ratio | 1.5 |") {
		t.Fatalf("page after two updates:\n%s", got)
	}
}
