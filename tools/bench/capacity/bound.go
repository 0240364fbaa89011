package capacity

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/warmpath/warmpath/tools/bench/des"
)

// OracleBound is the goodput no router can beat on a workload, fleet size
// and SLO (des.Bound): the fleet's workers busy every second with only the
// work the oracle cannot avoid. It is a throughput bound; the SLO enters
// only through the oracle's TTFT with every request served alone, which
// no load can improve on: when its p90 is over the SLO, no load meets it.
type OracleBound struct {
	Workload string  `json:"workload"`
	Workers  int     `json:"workers"`
	SLOms    float64 `json:"ttft_p90_slo_ms"`
	// Cache is the configuration whose GPUs, L1s and L2 the oracle pools.
	Cache    string `json:"cache"`
	Requests int    `json:"requests"`
	// EngineSecondsPerRequest is des.Bound's engine time over the
	// requests; its parts (totals) follow.
	EngineSecondsPerRequest float64 `json:"engine_seconds_per_request"`
	ComputeSeconds          float64 `json:"compute_seconds"`
	MemorySeconds           float64 `json:"memory_seconds"`
	OverheadSeconds         float64 `json:"overhead_seconds"`
	Steps                   int     `json:"steps"`
	// ThroughputRPS is workers / EngineSecondsPerRequest, and
	// ThroughputTokS its output tokens.
	ThroughputRPS  float64 `json:"throughput_bound_rps"`
	ThroughputTokS float64 `json:"throughput_bound_output_tok_s"`
	HitRate        float64 `json:"oracle_hit_rate"`
	AloneTTFTP90ms float64 `json:"oracle_alone_ttft_p90_ms"`
	// SLOAttainable: the oracle's alone TTFT p90 is within the SLO.
	SLOAttainable bool `json:"slo_attainable"`
	// GoodputRPS and GoodputTokS are the bound on goodput: the
	// throughput bound where the SLO is attainable, else 0.
	GoodputRPS  float64 `json:"goodput_bound_rps"`
	GoodputTokS float64 `json:"goodput_bound_output_tok_s"`
}

func newOracleBound(w Workload, cache string, b des.Bound) OracleBound {
	o := OracleBound{Workload: w.Name, Workers: w.Workers, SLOms: ms(w.SLO.TTFTP90), Cache: cache, Requests: b.Requests,
		ComputeSeconds: round(b.ComputeSeconds), MemorySeconds: round(b.MemorySeconds), OverheadSeconds: round(b.OverheadSeconds),
		Steps: b.Steps, HitRate: math.Round(b.HitRate*1e4) / 1e4, AloneTTFTP90ms: round(ms(b.TTFTP90)),
		SLOAttainable: b.TTFTP90 <= w.SLO.TTFTP90}
	if b.Requests == 0 || b.WorkerSeconds <= 0 {
		return o
	}
	perReq := b.WorkerSeconds / float64(b.Requests)
	o.EngineSecondsPerRequest = math.Round(perReq*1e4) / 1e4
	o.ThroughputRPS = round(float64(w.Workers) / perReq)
	o.ThroughputTokS = round(float64(w.Workers) / perReq * float64(b.OutputTokens) / float64(b.Requests))
	if o.SLOAttainable {
		o.GoodputRPS, o.GoodputTokS = o.ThroughputRPS, o.ThroughputTokS
	}
	return o
}

// Group is a workload, fleet size and SLO: the rows that compete.
type Group struct {
	Workload string
	Workers  int
	SLOms    float64
}

// Group is the row's.
func (r Row) Group() Group { return Group{r.Workload, r.Workers, r.SLOms} }

// Group is the bound's.
func (b OracleBound) Group() Group { return Group{b.Workload, b.Workers, b.SLOms} }

// Best is the best row of group g whose strategy is not exclude: the most
// goodput; a search's goodput is quantised to its probes, so ties are
// common, and the lower TTFT p90 there breaks them, then the name, so
// that every table names the same row.
func Best(rows []Row, g Group, exclude string) (Row, bool) {
	var best Row
	ok := false
	for _, r := range rows {
		if r.Group() != g || r.Strategy == exclude {
			continue
		}
		if !ok || cmp.Or(-cmp.Compare(r.GoodputRPS, best.GoodputRPS), cmp.Compare(r.TTFTP90ms, best.TTFTP90ms),
			cmp.Compare(r.Strategy, best.Strategy), cmp.Compare(r.Cache, best.Cache)) < 0 {
			best, ok = r, true
		}
	}
	return best, ok
}

// boundFor is group g's bound, if any.
func boundFor(bounds []OracleBound, g Group) (OracleBound, bool) {
	for _, b := range bounds {
		if b.Group() == g {
			return b, true
		}
	}
	return OracleBound{}, false
}

// pctOf is part as a percentage of whole, nil when whole is not positive.
func pctOf(part, whole float64) *float64 {
	if whole <= 0 {
		return nil
	}
	p := math.Round(part/whole*1000) / 10
	return &p
}

// boundText is the bound as the tables show it.
func boundText(b OracleBound) string {
	if !b.SLOAttainable {
		return fmt.Sprintf("0: the SLO is out of reach (oracle alone: p90 %.0f ms)", b.AloneTTFTP90ms)
	}
	return fmt.Sprintf("%.2f req/s (%.0f tok/s)", b.GoodputRPS, b.GoodputTokS)
}

// pctText is "28%", or "–".
func pctText(p *float64) string {
	if p == nil {
		return "–"
	}
	return fmt.Sprintf("%.0f%%", *p)
}

// BoundsMarkdown writes, per group, the oracle's bound beside the best
// configuration and round robin on GPU only (docs/benchmarks.md).
func BoundsMarkdown(w io.Writer, rows []Row, bounds []OracleBound, base Baselines) error {
	var b strings.Builder
	b.WriteString("| workload | workers | SLO | oracle hit rate | oracle TTFT p90, alone | engine s / request | oracle's bound | best warmpath configuration | its goodput | best at % of bound | round robin, GPU only, at % of bound |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|\n")
	for _, o := range bounds {
		best, _ := Best(rows, o.Group(), base.Strategy)
		var rr float64
		for _, r := range rows {
			if r.Group() == o.Group() && r.Strategy == base.Strategy && r.Cache == base.GPU {
				rr = r.GoodputRPS
			}
		}
		fmt.Fprintf(&b, "| %s | %d | %.0f ms | %.1f%% | %.0f ms | %.3f | %s | %s / %s | %.2f req/s | %s | %s |\n",
			o.Workload, o.Workers, o.SLOms, 100*o.HitRate, o.AloneTTFTP90ms, o.EngineSecondsPerRequest, boundText(o),
			best.Strategy, best.Cache, best.GoodputRPS, pctText(pctOf(best.GoodputRPS, o.GoodputRPS)), pctText(pctOf(rr, o.GoodputRPS)))
	}
	_, err := io.WriteString(w, b.String())
	return err
}
