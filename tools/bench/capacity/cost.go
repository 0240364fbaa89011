package capacity

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
)

// Price is what a GPU-hour costs, and where the figure comes from.
type Price struct {
	USDPerGPUHour float64 `json:"usd_per_gpu_hour"`
	Source        string  `json:"source"`
}

// Row is one curve's goodput and cost, and its change against the
// baselines of the same workload, fleet and SLO.
type Row struct {
	Workload    string  `json:"workload"`
	Workers     int     `json:"workers"`
	SLOms       float64 `json:"ttft_p90_slo_ms"`
	Strategy    string  `json:"strategy"`
	Cache       string  `json:"cache"`
	Outcome     Outcome `json:"outcome,omitempty"`
	Factor      float64 `json:"factor"`
	GoodputRPS  float64 `json:"goodput_rps"`
	OutputTokS  float64 `json:"output_tok_s"`
	TTFTP90ms   float64 `json:"ttft_p90_ms"`
	GPUSecPer1K float64 `json:"gpu_seconds_per_1k_tokens"`
	// USDPer1K is GPUSecPer1K priced: 0 when no load met the SLO.
	USDPer1K float64 `json:"usd_per_1k_tokens"`
	// Goodput ratios and cost changes (percent) against round robin on
	// GPU only (the managed offering's "no optimisation" baseline) and
	// against round robin with L1; nil where a side has no goodput.
	GoodputXvsRRGPU  *float64 `json:"goodput_x_vs_rr_gpu,omitempty"`
	CostPctvsRRGPU   *float64 `json:"cost_change_pct_vs_rr_gpu,omitempty"`
	GoodputXvsRRL1   *float64 `json:"goodput_x_vs_rr_l1,omitempty"`
	CostPctvsRRL1    *float64 `json:"cost_change_pct_vs_rr_l1,omitempty"`
	UnloadedP90Floor float64  `json:"lowest_load_ttft_p90_ms,omitempty"`
}

// Baselines name the two rows every row is compared with.
type Baselines struct {
	Strategy    string
	GPU, WithL1 string // cache configuration names
}

// Rows prices the curves and compares each with its baselines.
func Rows(curves []Curve, price Price, base Baselines) []Row {
	rows := make([]Row, len(curves))
	type key struct {
		workload string
		workers  int
		slo      float64
		cache    string
	}
	baseline := map[key]Row{}
	for i, c := range curves {
		r := Row{Workload: c.Workload, Workers: c.Workers, SLOms: c.SLOms, Strategy: c.Strategy, Cache: c.Cache}
		if c.Search != nil {
			r.Outcome = c.Search.Outcome
			if c.Search.Outcome == Unattainable && len(c.Search.Probes) > 0 {
				r.UnloadedP90Floor = c.Search.Probes[len(c.Search.Probes)-1].TTFTP90ms
			}
		}
		g := c.Goodput
		r.Factor, r.GoodputRPS, r.OutputTokS, r.TTFTP90ms, r.GPUSecPer1K = round(g.Factor), g.OfferedRPS, g.OutputTokS, g.TTFTP90ms, g.GPUSecondsPer1K
		if g.GPUSecondsPer1K > 0 {
			r.USDPer1K = math.Round(g.GPUSecondsPer1K/3600*price.USDPerGPUHour*1e6) / 1e6
		}
		rows[i] = r
		if c.Strategy == base.Strategy {
			baseline[key{c.Workload, c.Workers, c.SLOms, c.Cache}] = r
		}
	}
	for i := range rows {
		r := &rows[i]
		if gpu, ok := baseline[key{r.Workload, r.Workers, r.SLOms, base.GPU}]; ok {
			r.GoodputXvsRRGPU, r.CostPctvsRRGPU = compare(*r, gpu)
		}
		if l1, ok := baseline[key{r.Workload, r.Workers, r.SLOms, base.WithL1}]; ok {
			r.GoodputXvsRRL1, r.CostPctvsRRL1 = compare(*r, l1)
		}
	}
	return rows
}

// compare is r's goodput over b's and r's cost per token against b's.
func compare(r, b Row) (*float64, *float64) {
	if r.GoodputRPS <= 0 || b.GoodputRPS <= 0 {
		return nil, nil
	}
	x := math.Round(r.GoodputRPS/b.GoodputRPS*1000) / 1000
	c := math.Round((r.GPUSecPer1K-b.GPUSecPer1K)/b.GPUSecPer1K*1000) / 10
	return &x, &c
}

// Goal is the check: the best warmpath configuration's goodput
// against round robin on GPU only, at least Target times, with the
// oracle's bound beside it.
type Goal struct {
	Workload   string   `json:"workload"`
	Workers    int      `json:"workers"`
	SLOms      float64  `json:"ttft_p90_slo_ms"`
	Target     float64  `json:"target_x"`
	Best       string   `json:"best"`
	BestRPS    float64  `json:"best_goodput_rps"`
	BaseRPS    float64  `json:"baseline_goodput_rps"`
	X          *float64 `json:"goodput_x,omitempty"`
	CostChange *float64 `json:"cost_change_pct,omitempty"`
	// BoundRPS is the oracle's goodput bound (OracleBound.GoodputRPS);
	// BestPctOfBound and BasePctOfBound the two goodputs as percentages
	// of it (absent when the bound is 0).
	BoundRPS       float64  `json:"oracle_bound_goodput_rps"`
	BestPctOfBound *float64 `json:"best_pct_of_oracle_bound,omitempty"`
	BasePctOfBound *float64 `json:"baseline_pct_of_oracle_bound,omitempty"`
	Met            bool     `json:"met"`
	Note           string   `json:"note,omitempty"`
}

// CheckGoal finds the best row (Best) of workload at workers and slo whose
// strategy is not the baseline's and compares it with the baseline on GPU
// only and with the group's oracle bound.
func CheckGoal(rows []Row, bounds []OracleBound, workload string, workers int, slo float64, target float64, base Baselines) Goal {
	g := Goal{Workload: workload, Workers: workers, SLOms: slo, Target: target}
	grp := Group{workload, workers, slo}
	for _, r := range rows {
		if r.Group() == grp && r.Strategy == base.Strategy && r.Cache == base.GPU {
			g.BaseRPS = r.GoodputRPS
		}
	}
	if o, ok := boundFor(bounds, grp); ok {
		g.BoundRPS = o.GoodputRPS
		g.BasePctOfBound = pctOf(g.BaseRPS, o.GoodputRPS)
	}
	best, ok := Best(rows, grp, base.Strategy)
	if !ok {
		g.Note = "no warmpath configuration ran"
		return g
	}
	g.Best, g.BestRPS = best.Strategy+" / "+best.Cache, best.GoodputRPS
	g.BestPctOfBound = pctOf(best.GoodputRPS, g.BoundRPS)
	switch {
	case g.BaseRPS <= 0 && g.BestRPS > 0:
		g.Met = true
		g.Note = fmt.Sprintf("round robin on GPU only meets no load under the SLO (its lowest-load TTFT p90 is above %.0f ms): the ratio is unbounded", slo)
	case g.BaseRPS <= 0:
		g.Note = "neither configuration meets the SLO at any load tried"
	default:
		g.X, g.CostChange = best.GoodputXvsRRGPU, best.CostPctvsRRGPU
		g.Met = g.X != nil && *g.X >= target
	}
	return g
}

// Markdown writes the rows as a markdown table (docs/benchmarks.md).
func Markdown(w io.Writer, rows []Row) error {
	var b strings.Builder
	b.WriteString("| workload | workers | SLO | strategy / cache | outcome | goodput (req/s) | output tok/s | TTFT p90 | GPU-s / 1K tok | $ / 1K tok | vs rr GPU | vs rr L1 |\n")
	b.WriteString("|---|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		outcome := string(r.Outcome)
		if r.Outcome == Unattainable {
			outcome = fmt.Sprintf("unattainable (p90 %.0f ms at the lowest load)", r.UnloadedP90Floor)
		}
		fmt.Fprintf(&b, "| %s | %d | %.0f ms | %s / %s | %s | %.2f | %.0f | %.0f ms | %.2f | %.5f | %s | %s |\n",
			r.Workload, r.Workers, r.SLOms, r.Strategy, r.Cache, outcome, r.GoodputRPS, r.OutputTokS, r.TTFTP90ms,
			r.GPUSecPer1K, r.USDPer1K, versus(r.GoodputXvsRRGPU, r.CostPctvsRRGPU), versus(r.GoodputXvsRRL1, r.CostPctvsRRL1))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// versus is "1.50x, -33% cost", or "–" where a side met no load.
func versus(x, cost *float64) string {
	if x == nil || cost == nil {
		return "–"
	}
	return fmt.Sprintf("%.2fx, %+.0f%% cost", *x, *cost)
}

// Markers delimit the README's capacity table, which `make bench`
// rewrites from bench/results/capacity.json.
const (
	HeadlineBegin = "<!-- capacity:begin (generated from bench/results/capacity.json by `make bench`) -->"
	HeadlineEnd   = "<!-- capacity:end -->"
)

// Headline writes one line per workload, fleet size and SLO: round robin
// on GPU only, the warmpath configuration with the most goodput (Best),
// what that does to the cost of a thousand output tokens, and where it
// stands against the oracle's bound.
func Headline(w io.Writer, rows []Row, bounds []OracleBound, base Baselines) error {
	var b strings.Builder
	b.WriteString("| workload | workers | TTFT p90 SLO | round robin, GPU only | best warmpath configuration | its goodput | its TTFT p90 | $ per 1M output tokens | goodput vs round robin | cost vs round robin | oracle's bound | best at % of the bound |\n")
	b.WriteString("|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|\n")
	var order []Group
	baseline := map[Group]Row{}
	for _, r := range rows {
		g := r.Group()
		if !slices.Contains(order, g) {
			order = append(order, g)
		}
		if r.Strategy == base.Strategy && r.Cache == base.GPU {
			baseline[g] = r
		}
	}
	for _, g := range order {
		r, ok := Best(rows, g, base.Strategy)
		if !ok {
			continue
		}
		rr := baseline[g]
		rrText := fmt.Sprintf("%.2f req/s", rr.GoodputRPS)
		if rr.GoodputRPS == 0 {
			rrText = "meets no load"
		}
		x, cost := "unbounded", "–"
		if r.GoodputXvsRRGPU != nil {
			x, cost = fmt.Sprintf("%.2f×", *r.GoodputXvsRRGPU), fmt.Sprintf("%+.0f%%", *r.CostPctvsRRGPU)
		}
		bound, pct := "–", "–"
		if o, ok := boundFor(bounds, g); ok {
			bound, pct = boundText(o), pctText(pctOf(r.GoodputRPS, o.GoodputRPS))
		}
		fmt.Fprintf(&b, "| %s | %d | %.0f ms | %s | %s / %s | %.2f req/s (%.0f tok/s) | %.0f ms | $%.2f | %s | %s | %s | %s |\n",
			g.Workload, g.Workers, g.SLOms, rrText, r.Strategy, r.Cache, r.GoodputRPS, r.OutputTokS, r.TTFTP90ms, 1000*r.USDPer1K, x, cost, bound, pct)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
