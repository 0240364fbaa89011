// Package dashrender draws a Grafana dashboard's panels to a PNG from a
// Prometheus server's data, so a reader sees what the dashboard shows
// without a Grafana (none can be installed where warmpath is built). It
// reads the committed dashboard JSON, runs each panel's queries over a
// time range through Prometheus's HTTP API, and draws one small chart per
// panel with gonum/plot.
package dashrender

import (
	"context"
	"encoding/json"
	"fmt"
	"image/color"
	"math"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Options say what to render.
type Options struct {
	Prometheus string // base URL
	Start, End time.Time
	Step       time.Duration
	// RateInterval replaces Grafana's $__rate_interval.
	RateInterval string
	Columns      int
}

type panelJSON struct {
	Type        string `json:"type"`
	Title       string `json:"title"`
	FieldConfig struct {
		Defaults struct {
			Unit   string   `json:"unit"`
			Min    *float64 `json:"min"`
			Max    *float64 `json:"max"`
			Custom struct {
				AxisLabel string `json:"axisLabel"`
			} `json:"custom"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
	Targets []struct {
		Expr         string `json:"expr"`
		LegendFormat string `json:"legendFormat"`
	} `json:"targets"`
}

type dashboardJSON struct {
	Title      string      `json:"title"`
	Panels     []panelJSON `json:"panels"`
	Templating struct {
		List []struct {
			Type  string `json:"type"`
			Name  string `json:"name"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

// expander replaces the dashboard's variables as Grafana does with "All"
// selected and every textbox or constant at the value it ships with.
func (d dashboardJSON) expander(rateInterval string) *strings.Replacer {
	pairs := []string{"$__rate_interval", rateInterval, "$namespace", ".*", "$endpoint", ".*", "$model", ".*"}
	for _, v := range d.Templating.List {
		if q, ok := v.Query.(string); ok && (v.Type == "textbox" || v.Type == "constant") {
			pairs = append(pairs, "$"+v.Name, q)
		}
	}
	return strings.NewReplacer(pairs...)
}

// maxLines bounds the lines of one panel, so its legend fits the chart.
const maxLines = 8

// Render draws the dashboard in file to a PNG at out. It returns how many
// panels had data.
func Render(ctx context.Context, file, out string, o Options) (int, error) {
	raw, err := os.ReadFile(file)
	if err != nil {
		return 0, err
	}
	var d dashboardJSON
	if err := json.Unmarshal(raw, &d); err != nil {
		return 0, fmt.Errorf("dashrender: %s: %w", file, err)
	}
	if o.Columns <= 0 {
		o.Columns = 3
	}
	vars := d.expander(o.RateInterval)
	var plots []*plot.Plot
	withData := 0
	for _, p := range d.Panels {
		if p.Type != "timeseries" && p.Type != "stat" {
			continue // rows
		}
		pl, has, err := panelPlot(ctx, o, vars, p)
		if err != nil {
			return withData, fmt.Errorf("dashrender: %s / %s: %w", d.Title, p.Title, err)
		}
		if has {
			withData++
		}
		plots = append(plots, pl)
	}
	return withData, drawGrid(out, d.Title, plots, o.Columns)
}

// line is one series of a panel, named by its legend.
type line struct {
	name   string
	points plotter.XYs
}

// panelPlot runs a panel's queries and draws their series in the panel's
// unit, spelled out and scaled (ms, %, MiB/s) as Grafana would show it.
func panelPlot(ctx context.Context, o Options, vars *strings.Replacer, p panelJSON) (*plot.Plot, bool, error) {
	var lines []line
	peak := 0.0
	for _, tg := range p.Targets {
		series, err := queryRange(ctx, o, vars.Replace(tg.Expr))
		if err != nil {
			return nil, false, err
		}
		for _, s := range series {
			if len(s.points) == 0 || len(lines) >= maxLines {
				continue
			}
			for _, pt := range s.points {
				peak = max(peak, math.Abs(pt.Y))
			}
			lines = append(lines, line{name: legend(tg.LegendFormat, s.labels, p.Title), points: s.points})
		}
	}
	label, factor := axis(p.FieldConfig.Defaults.Unit, peak)
	if p.FieldConfig.Defaults.Custom.AxisLabel != "" {
		label = p.FieldConfig.Defaults.Custom.AxisLabel
	}
	pl := newPlot(p.Title, label)
	for i, l := range lines {
		scaled := make(plotter.XYs, len(l.points))
		for j, pt := range l.points {
			scaled[j] = plotter.XY{X: pt.X, Y: pt.Y * factor}
		}
		ln, err := plotter.NewLine(scaled)
		if err != nil {
			return nil, false, err
		}
		ln.Color = plotutil.Color(i)
		ln.Width = vg.Points(1.2)
		pl.Add(ln)
		pl.Legend.Add(l.name, ln)
	}
	bound(pl, p.FieldConfig.Defaults.Min, p.FieldConfig.Defaults.Max, factor)
	if len(lines) == 0 {
		pl.Title.Text += " (no data)"
		pl.Title.TextStyle.Color = color.RGBA{R: 200, A: 255}
	}
	return pl, len(lines) > 0, nil
}

// bound applies the panel's axis limits as Grafana does (ratios: 0..100%),
// so a flat zero line sits on the floor instead of mid-chart.
func bound(pl *plot.Plot, lo, hi *float64, factor float64) {
	if lo != nil {
		pl.Y.Min = *lo * factor
	}
	if hi != nil {
		pl.Y.Max = *hi * factor
	}
	if pl.Y.Max <= pl.Y.Min {
		pl.Y.Max = pl.Y.Min + 1
	}
}

func newPlot(title, yLabel string) *plot.Plot {
	pl := plot.New()
	pl.Title.Text = title
	pl.Title.TextStyle.Font.Size = vg.Points(9)
	pl.X.Label.Text = "seconds"
	pl.Y.Label.Text = yLabel
	pl.X.Tick.Label.Font.Size = vg.Points(7)
	pl.Y.Tick.Label.Font.Size = vg.Points(7)
	pl.Legend.TextStyle.Font.Size = vg.Points(6)
	pl.Legend.Top = true
	return pl
}

// drawGrid lays the panels out Columns wide under the dashboard's title.
func drawGrid(out, title string, plots []*plot.Plot, columns int) error {
	rows := (len(plots) + columns - 1) / columns
	grid := make([][]*plot.Plot, rows)
	for i := range grid {
		grid[i] = make([]*plot.Plot, columns)
		for j := range columns {
			if k := i*columns + j; k < len(plots) {
				grid[i][j] = plots[k]
			}
		}
	}
	img := vgimg.New(vg.Points(float64(300*columns)), vg.Points(float64(200*rows+30)))
	dc := draw.New(img)
	dc.FillText(draw.TextStyle{Color: color.Black, Font: plot.DefaultFont, Handler: plot.DefaultTextHandler, XAlign: draw.XCenter},
		vg.Point{X: dc.Size().X / 2, Y: dc.Size().Y - vg.Points(18)}, title)
	canvases := plot.Align(grid, draw.Tiles{Rows: rows, Cols: columns, PadX: vg.Points(8), PadY: vg.Points(8), PadTop: vg.Points(30)}, dc)
	for i := range grid {
		for j := range grid[i] {
			if grid[i][j] != nil {
				grid[i][j].Draw(canvases[i][j])
			}
		}
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		return err
	}
	return f.Close()
}

// unitWords spells out Grafana's unit ids the dashboards use, with the
// factor a value is multiplied by to read in that unit.
var unitWords = map[string]struct {
	label  string
	factor float64
}{
	"s":           {"ms", 1000},
	"percentunit": {"%", 100},
	"reqps":       {"req/s", 1},
	"ops":         {"ops/s", 1},
	"tokens/s":    {"tokens/s", 1},
	"currencyUSD": {"$", 1},
	"none":        {"", 1},
	"short":       {"", 1},
}

// byteUnits are the binary multiples Grafana's bytes units step through.
var byteUnits = []string{"bytes", "KiB", "MiB", "GiB", "TiB"}

// axis is the y-axis label for a Grafana unit id and the factor that
// converts values to it; byte units are scaled so peak reads below 1024.
func axis(unit string, peak float64) (string, float64) {
	if w, ok := unitWords[unit]; ok {
		return w.label, w.factor
	}
	if unit == "bytes" || unit == "Bps" {
		i, factor := 0, 1.0
		for peak*factor >= 1024 && i < len(byteUnits)-1 {
			i, factor = i+1, factor/1024
		}
		if unit == "Bps" {
			return byteUnits[i] + "/s", factor
		}
		return byteUnits[i], factor
	}
	return unit, 1
}

type series struct {
	labels map[string]string
	points plotter.XYs
}

func queryRange(ctx context.Context, o Options, expr string) ([]series, error) {
	q := url.Values{"query": {expr}, "start": {strconv.FormatInt(o.Start.Unix(), 10)},
		"end": {strconv.FormatInt(o.End.Unix(), 10)}, "step": {strconv.Itoa(int(max(o.Step, time.Second) / time.Second))}}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, o.Prometheus+"/api/v1/query_range?"+q.Encode(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var out struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
				Values [][2]any          `json:"values"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, err
	}
	if out.Status != "success" {
		return nil, fmt.Errorf("query_range: %s", out.Error)
	}
	var res []series
	for _, r := range out.Data.Result {
		s := series{labels: r.Metric}
		for _, v := range r.Values {
			ts, _ := v[0].(float64)
			str, _ := v[1].(string)
			y, err := strconv.ParseFloat(str, 64)
			if err != nil || math.IsNaN(y) || math.IsInf(y, 0) {
				continue
			}
			s.points = append(s.points, plotter.XY{X: ts - float64(o.Start.Unix()), Y: y})
		}
		res = append(res, s)
	}
	return res, nil
}

var legendRef = regexp.MustCompile(`\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}`)

// legend fills a Grafana legend format from a series' labels. Without a
// format, or when the labels it names are missing (the 0 of an `or on()
// vector(0)`), it is the series' labels, or the panel's title when it has
// none.
func legend(format string, labels map[string]string, title string) string {
	filled := legendRef.ReplaceAllStringFunc(format, func(m string) string {
		return labels[legendRef.FindStringSubmatch(m)[1]]
	})
	if strings.TrimSpace(filled) == "" {
		return labelSet(labels, title)
	}
	return filled
}

// labelSet is labels as {a="1", b="2"} (sorted, __name__ left out), or
// fallback when there are none.
func labelSet(labels map[string]string, fallback string) string {
	var parts []string
	for k, v := range labels {
		if k != "__name__" {
			parts = append(parts, k+"="+strconv.Quote(v))
		}
	}
	if len(parts) == 0 {
		return fallback
	}
	slices.Sort(parts)
	return "{" + strings.Join(parts, ", ") + "}"
}
