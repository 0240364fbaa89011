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

type dashboardJSON struct {
	Title  string `json:"title"`
	Panels []struct {
		Type        string `json:"type"`
		Title       string `json:"title"`
		FieldConfig struct {
			Defaults struct {
				Unit string `json:"unit"`
			} `json:"defaults"`
		} `json:"fieldConfig"`
		Targets []struct {
			Expr         string `json:"expr"`
			LegendFormat string `json:"legendFormat"`
		} `json:"targets"`
	} `json:"panels"`
}

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
	vars := strings.NewReplacer("$__rate_interval", o.RateInterval, "$namespace", ".*", "$endpoint", ".*", "$model", ".*")
	var plots []*plot.Plot
	withData := 0
	for _, p := range d.Panels {
		if p.Type != "timeseries" && p.Type != "stat" {
			continue // rows
		}
		pl := plot.New()
		pl.Title.Text = p.Title
		pl.Title.TextStyle.Font.Size = vg.Points(9)
		pl.X.Label.Text = "seconds"
		pl.Y.Label.Text = p.FieldConfig.Defaults.Unit
		pl.X.Tick.Label.Font.Size = vg.Points(7)
		pl.Y.Tick.Label.Font.Size = vg.Points(7)
		pl.Legend.TextStyle.Font.Size = vg.Points(6)
		pl.Legend.Top = true
		lines := 0
		for _, tg := range p.Targets {
			series, err := queryRange(ctx, o, vars.Replace(tg.Expr))
			if err != nil {
				return withData, fmt.Errorf("dashrender: %s / %s: %w", d.Title, p.Title, err)
			}
			for _, s := range series {
				if len(s.points) == 0 || lines >= 8 {
					continue
				}
				line, err := plotter.NewLine(s.points)
				if err != nil {
					return withData, err
				}
				line.Color = plotutil.Color(lines)
				line.Width = vg.Points(1.2)
				pl.Add(line)
				pl.Legend.Add(legend(tg.LegendFormat, s.labels), line)
				lines++
			}
		}
		if lines > 0 {
			withData++
		} else {
			pl.Title.Text += " (no data)"
			pl.Title.TextStyle.Color = color.RGBA{R: 200, A: 255}
		}
		plots = append(plots, pl)
	}
	rows := (len(plots) + o.Columns - 1) / o.Columns
	grid := make([][]*plot.Plot, rows)
	for i := range grid {
		grid[i] = make([]*plot.Plot, o.Columns)
		for j := range o.Columns {
			if k := i*o.Columns + j; k < len(plots) {
				grid[i][j] = plots[k]
			}
		}
	}
	img := vgimg.New(vg.Points(float64(300*o.Columns)), vg.Points(float64(200*rows+30)))
	dc := draw.New(img)
	title := draw.Crop(dc, 0, 0, 0, 0)
	title.FillText(draw.TextStyle{Color: color.Black, Font: plot.DefaultFont, Handler: plot.DefaultTextHandler, XAlign: draw.XCenter},
		vg.Point{X: dc.Size().X / 2, Y: dc.Size().Y - vg.Points(18)}, d.Title)
	canvases := plot.Align(grid, draw.Tiles{Rows: rows, Cols: o.Columns, PadX: vg.Points(8), PadY: vg.Points(8), PadTop: vg.Points(30)}, dc)
	for i := range grid {
		for j := range grid[i] {
			if grid[i][j] != nil {
				grid[i][j].Draw(canvases[i][j])
			}
		}
	}
	f, err := os.Create(out)
	if err != nil {
		return withData, err
	}
	defer f.Close()
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		return withData, err
	}
	return withData, f.Close()
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

// legend fills a Grafana legend format from a series' labels.
func legend(format string, labels map[string]string) string {
	if format == "" {
		return "value"
	}
	return legendRef.ReplaceAllStringFunc(format, func(m string) string {
		return labels[legendRef.FindStringSubmatch(m)[1]]
	})
}
