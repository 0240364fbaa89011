package capacity

import (
	"cmp"
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/warmpath/warmpath/tools/bench/report"
)

// Plots writes two PNGs per workload, fleet size and SLO: capacity_<id>.png,
// each strategy and cache configuration's goodput against the arrival rate
// beside its TTFT p90 against the same load (the search's probes), with
// the SLO drawn; and capacity_cost_<id>.png, the goodput found beside
// what a thousand output tokens then cost, one bar per configuration.
// rows are Rows(curves, ...), in the same order. It returns the paths.
func Plots(dir string, curves []Curve, rows []Row) ([]string, error) {
	if len(rows) != len(curves) {
		return nil, fmt.Errorf("capacity: %d rows for %d curves", len(rows), len(curves))
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("capacity: %w", err)
	}
	var paths []string
	for _, idx := range groups(curves) {
		group := make([]Curve, len(idx))
		for i, j := range idx {
			group[i] = curves[j]
		}
		c0 := group[0]
		id := fmt.Sprintf("%s_%dw_%.0fms", c0.Workload, c0.Workers, c0.SLOms)
		ceiling := 3 * c0.SLOms
		good, err := probePlot(group, fmt.Sprintf("Goodput vs arrival rate — %s, %d workers", c0.Workload, c0.Workers),
			fmt.Sprintf("requests/s with TTFT <= %.0f ms", c0.SLOms), 0, func(p Probe) float64 { return p.WithinSLORPS })
		if err != nil {
			return nil, err
		}
		// Overloaded probes reach tens of seconds; capped, the curves near
		// the SLO stay legible.
		ttft, err := probePlot(group, "TTFT p90 vs arrival rate (search probes)", fmt.Sprintf("TTFT p90 (ms, capped at %.0f)", ceiling),
			ceiling, func(p Probe) float64 { return p.TTFTP90ms })
		if err != nil {
			return nil, err
		}
		if err := sloLine(ttft, c0.SLOms); err != nil {
			return nil, err
		}
		path := filepath.Join(dir, "capacity_"+id+".png")
		if err := report.SaveSideBySide(path, good, ttft); err != nil {
			return nil, err
		}
		paths = append(paths, path)

		path, err = costPlot(dir, id, idx, curves, rows)
		if err != nil {
			return nil, err
		}
		paths = append(paths, path)
	}
	return paths, nil
}

// costPlot draws the group's goodput and dollars per 1K output tokens as
// bars; a configuration that met no load is named "(none)" at zero.
func costPlot(dir, id string, idx []int, curves []Curve, rows []Row) (string, error) {
	c0 := curves[idx[0]]
	var names []string
	var rps, usd plotter.Values
	for _, i := range idx {
		name := curves[i].Name()
		if curves[i].Goodput.OfferedRPS == 0 {
			name += " (none)"
		}
		names = append(names, name)
		rps, usd = append(rps, curves[i].Goodput.OfferedRPS), append(usd, 1000*rows[i].USDPer1K)
	}
	bars, err := report.BarPlot(fmt.Sprintf("Goodput (req/s at TTFT p90 <= %.0f ms) — %s, %d workers", c0.SLOms, c0.Workload, c0.Workers),
		names, rps, color.RGBA{R: 44, G: 160, B: 44, A: 255})
	if err != nil {
		return "", err
	}
	cost, err := report.BarPlot("Cost at that goodput ($ per 1M output tokens; lower is better)", names, usd,
		color.RGBA{R: 214, G: 39, B: 40, A: 255})
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "capacity_cost_"+id+".png")
	return path, report.SaveSideBySide(path, bars, cost)
}

// probePlot draws y of each curve's probes against their offered load,
// capped at ceiling when it is positive.
func probePlot(group []Curve, title, ylabel string, ceiling float64, y func(Probe) float64) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "arrival rate (req/s)"
	p.Y.Label.Text = ylabel
	p.Y.Min = 0
	if ceiling > 0 {
		p.Y.Max = ceiling
	}
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())
	i := 0
	for _, c := range group {
		if c.Search == nil {
			continue
		}
		probes := slices.Clone(c.Search.Probes)
		slices.SortFunc(probes, func(a, b Probe) int { return cmp.Compare(a.OfferedRPS, b.OfferedRPS) })
		pts := make(plotter.XYs, 0, len(probes))
		for _, pr := range probes {
			if pr.OfferedRPS > 0 {
				v := y(pr)
				if ceiling > 0 {
					v = min(v, ceiling)
				}
				pts = append(pts, plotter.XY{X: pr.OfferedRPS, Y: v})
			}
		}
		if len(pts) == 0 {
			continue
		}
		line, scatter, err := plotter.NewLinePoints(pts)
		if err != nil {
			return nil, fmt.Errorf("capacity: %w", err)
		}
		line.Color, scatter.Color = plotutil.Color(i), plotutil.Color(i)
		line.Dashes = plotutil.Dashes(i / 7)
		line.Width = vg.Points(1.5)
		scatter.Shape = plotutil.Shape(i)
		p.Add(line, scatter)
		p.Legend.Add(c.Name(), line, scatter)
		i++
	}
	return p, nil
}

// sloLine draws the SLO across the plot's load range.
func sloLine(p *plot.Plot, slo float64) error {
	xmax := max(p.X.Max, 1)
	line, err := plotter.NewLine(plotter.XYs{{X: 0, Y: slo}, {X: xmax, Y: slo}})
	if err != nil {
		return fmt.Errorf("capacity: %w", err)
	}
	line.Color = color.Black
	line.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	p.Add(line)
	p.Legend.Add(fmt.Sprintf("SLO %.0f ms", slo), line)
	return nil
}

// groups splits curves by workload, fleet size and SLO, in their order,
// as indices into curves.
func groups(curves []Curve) [][]int {
	var out [][]int
	for j, c := range curves {
		i := slices.IndexFunc(out, func(g []int) bool {
			g0 := curves[g[0]]
			return g0.Workload == c.Workload && g0.Workers == c.Workers && g0.SLOms == c.SLOms
		})
		if i < 0 {
			out = append(out, nil)
			i = len(out) - 1
		}
		out[i] = append(out[i], j)
	}
	return out
}
