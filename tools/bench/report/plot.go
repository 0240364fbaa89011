package report

import (
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"slices"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Plots writes, for one workload, ttft_cdf_<workload>.png (the TTFT
// distribution of every configuration) and bars_<workload>.png (hit rate
// and throughput per configuration) into dir, and returns their paths.
func Plots(dir, workload string, runs []Run, sums []Summary) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	cdf := plot.New()
	cdf.Title.Text = "TTFT CDF — " + workload
	cdf.X.Label.Text = "TTFT (ms, log scale)"
	cdf.Y.Label.Text = "fraction of requests"
	cdf.X.Scale = plot.LogScale{}
	cdf.X.Tick.Marker = plot.LogTicks{Prec: -1}
	cdf.Legend.Top = false
	cdf.Legend.Left = false
	cdf.Add(plotter.NewGrid())
	for i, r := range runs {
		pts := cdfPoints(r.Samples)
		if len(pts) == 0 {
			continue
		}
		line, err := plotter.NewLine(pts)
		if err != nil {
			return nil, fmt.Errorf("report: %w", err)
		}
		line.Color = plotutil.Color(i)
		line.Dashes = plotutil.Dashes(i / 7)
		line.Width = vg.Points(1.5)
		cdf.Add(line)
		cdf.Legend.Add(r.Name, line)
	}
	cdfPath := filepath.Join(dir, "ttft_cdf_"+workload+".png")
	if err := cdf.Save(7*vg.Inch, 4.5*vg.Inch, cdfPath); err != nil {
		return nil, fmt.Errorf("report: save %s: %w", cdfPath, err)
	}

	names := make([]string, len(sums))
	hit := make(plotter.Values, len(sums))
	tput := make(plotter.Values, len(sums))
	for i, s := range sums {
		names[i] = s.Name
		hit[i] = 100 * s.HitRate
		tput[i] = s.ThroughputTokS
	}
	bars, err := BarPlot("Prefix hit rate (%) — "+workload, names, hit, color.RGBA{R: 31, G: 119, B: 180, A: 255})
	if err != nil {
		return nil, err
	}
	tp, err := BarPlot("Output throughput (tok/s) — "+workload, names, tput, color.RGBA{R: 255, G: 127, B: 14, A: 255})
	if err != nil {
		return nil, err
	}
	barsPath := filepath.Join(dir, "bars_"+workload+".png")
	if err := SaveSideBySide(barsPath, bars, tp); err != nil {
		return nil, err
	}
	return []string{cdfPath, barsPath}, nil
}

func cdfPoints(samples []Sample) plotter.XYs {
	var ttfts []time.Duration
	for _, s := range samples {
		if !s.Failed && s.TTFT > 0 {
			ttfts = append(ttfts, s.TTFT)
		}
	}
	sortDurations(ttfts)
	pts := make(plotter.XYs, len(ttfts))
	for i, d := range ttfts {
		pts[i] = plotter.XY{X: float64(d) / float64(time.Millisecond), Y: float64(i+1) / float64(len(ttfts))}
	}
	return pts
}

// BarPlot is one bar per name, in the report's style.
func BarPlot(title string, names []string, vals plotter.Values, c color.Color) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	b, err := plotter.NewBarChart(vals, vg.Points(22))
	if err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	b.Color = c
	b.LineStyle.Width = 0
	p.Add(b)
	p.NominalX(names...)
	p.X.Tick.Label.Rotation = 0.5
	p.X.Tick.Label.XAlign = -1
	p.X.Tick.Label.YAlign = -0.5
	return p, nil
}

// SaveSideBySide draws two plots side by side into one PNG.
func SaveSideBySide(path string, left, right *plot.Plot) error {
	img := vgimg.New(12*vg.Inch, 4.5*vg.Inch)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Points(12), PadY: vg.Points(8)}
	canvases := plot.Align([][]*plot.Plot{{left, right}}, tiles, dc)
	left.Draw(canvases[0][0])
	right.Draw(canvases[0][1])
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	defer f.Close()
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		return fmt.Errorf("report: write %s: %w", path, err)
	}
	return f.Close()
}

func sortDurations(d []time.Duration) { slices.Sort(d) }
