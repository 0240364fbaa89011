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

// Plots writes, per workload, fleet size and SLO, capacity_<id>.png: the
// goodput of each strategy and cache configuration as bars beside each
// curve's TTFT p90 against the offered load its probes measured, with
// the SLO drawn; it returns their paths.
func Plots(dir string, curves []Curve) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("capacity: %w", err)
	}
	var paths []string
	for _, group := range groups(curves) {
		c0 := group[0]
		id := fmt.Sprintf("%s_%dw_%.0fms", c0.Workload, c0.Workers, c0.SLOms)
		var names []string
		var vals plotter.Values
		for _, c := range group {
			switch {
			case c.NotModelled != "":
			case c.Goodput.OfferedRPS == 0:
				names, vals = append(names, c.Name()+" (none)"), append(vals, 0)
			default:
				names, vals = append(names, c.Name()), append(vals, c.Goodput.OfferedRPS)
			}
		}
		bars, err := report.BarPlot(fmt.Sprintf("Goodput (req/s at TTFT p90 <= %.0f ms) — %s, %d workers", c0.SLOms, c0.Workload, c0.Workers),
			names, vals, color.RGBA{R: 44, G: 160, B: 44, A: 255})
		if err != nil {
			return nil, err
		}
		lines, err := loadPlot(group)
		if err != nil {
			return nil, err
		}
		path := filepath.Join(dir, "capacity_"+id+".png")
		if err := report.SaveSideBySide(path, bars, lines); err != nil {
			return nil, err
		}
		paths = append(paths, path)
	}
	return paths, nil
}

// loadPlot draws each curve's probes, TTFT p90 against offered load.
func loadPlot(group []Curve) (*plot.Plot, error) {
	c0 := group[0]
	p := plot.New()
	p.Title.Text = "TTFT p90 vs offered load (search probes)"
	p.X.Label.Text = "offered load (req/s)"
	// Overloaded probes reach tens of seconds; capped, the curves near the
	// SLO stay legible.
	ceiling := 3 * c0.SLOms
	p.Y.Label.Text = fmt.Sprintf("TTFT p90 (ms, capped at %.0f)", ceiling)
	p.Y.Min, p.Y.Max = 0, ceiling
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())
	var xmax float64
	i := 0
	for _, c := range group {
		if c.Search == nil {
			continue
		}
		probes := slices.Clone(c.Search.Probes)
		slices.SortFunc(probes, func(a, b Probe) int { return cmp.Compare(a.OfferedRPS, b.OfferedRPS) })
		pts := make(plotter.XYs, 0, len(probes))
		for _, pr := range probes {
			if pr.TTFTP90ms > 0 {
				pts = append(pts, plotter.XY{X: pr.OfferedRPS, Y: min(pr.TTFTP90ms, ceiling)})
				xmax = max(xmax, pr.OfferedRPS)
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
	slo, err := plotter.NewLine(plotter.XYs{{X: 0, Y: c0.SLOms}, {X: xmax, Y: c0.SLOms}})
	if err != nil {
		return nil, fmt.Errorf("capacity: %w", err)
	}
	slo.Color = color.Black
	slo.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	p.Add(slo)
	p.Legend.Add(fmt.Sprintf("SLO %.0f ms", c0.SLOms), slo)
	return p, nil
}

// groups splits curves by workload, fleet size and SLO, in their order.
func groups(curves []Curve) [][]Curve {
	var out [][]Curve
	for _, c := range curves {
		i := slices.IndexFunc(out, func(g []Curve) bool {
			return g[0].Workload == c.Workload && g[0].Workers == c.Workers && g[0].SLOms == c.SLOms
		})
		if i < 0 {
			out = append(out, nil)
			i = len(out) - 1
		}
		out[i] = append(out[i], c)
	}
	return out
}
