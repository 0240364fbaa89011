package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// PanelQuery is one query of a committed dashboard.
type PanelQuery struct {
	Dashboard, Panel, Expr string
}

// DashboardQueries reads every panel query from dir/*.json, each textbox
// or constant variable replaced by the value the dashboard ships with.
func DashboardQueries(t testing.TB, dir string) []PanelQuery {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no dashboards in %s (%v): run make dashboards", dir, err)
	}
	var out []PanelQuery
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var d struct {
			Title  string `json:"title"`
			Panels []struct {
				Title   string `json:"title"`
				Targets []struct {
					Expr string `json:"expr"`
				} `json:"targets"`
			} `json:"panels"`
			Templating struct {
				List []struct {
					Type, Name string
					Query      any
				} `json:"list"`
			} `json:"templating"`
		}
		if err := json.Unmarshal(raw, &d); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		var inputs []string
		for _, v := range d.Templating.List {
			if q, ok := v.Query.(string); ok && (v.Type == "textbox" || v.Type == "constant") {
				inputs = append(inputs, "$"+v.Name, q)
			}
		}
		defaults := strings.NewReplacer(inputs...)
		for _, p := range d.Panels {
			for _, tg := range p.Targets {
				out = append(out, PanelQuery{d.Title, p.Title, defaults.Replace(tg.Expr)})
			}
		}
	}
	return out
}

// expandVars does what Grafana does with the dashboards' variables, "All"
// selected, over a short window that a test run can fill.
var expandVars = strings.NewReplacer("$__rate_interval", "20s", "$namespace", ".*", "$endpoint", ".*", "$model", ".*")

// metricRef is a metric name directly followed by a selector.
var metricRef = regexp.MustCompile(`([a-zA-Z_:][a-zA-Z0-9_:]*)\{`)

// CheckDashboards fails t for every metric a panel of dir/*.json names that
// the Prometheus at prom has never scraped, and for every panel query that
// returns no data there now.
func CheckDashboards(ctx context.Context, t testing.TB, prom, dir string) {
	t.Helper()
	names, err := PromLabelValues(ctx, prom, "__name__")
	if err != nil {
		t.Fatal(err)
	}
	queries := DashboardQueries(t, dir)
	for _, q := range queries {
		for _, m := range metricRef.FindAllStringSubmatch(q.Expr, -1) {
			if !names[m[1]] {
				t.Errorf("%s / %s: metric %s is not exported by any service", q.Dashboard, q.Panel, m[1])
			}
		}
	}
	for _, q := range queries {
		n, err := PromQuery(ctx, prom, expandVars.Replace(q.Expr))
		if err != nil {
			t.Errorf("%s / %s: %v", q.Dashboard, q.Panel, err)
			continue
		}
		if n == 0 {
			t.Errorf("%s / %s: no data for %s", q.Dashboard, q.Panel, q.Expr)
		}
	}
	t.Logf("%d queries over %d metric names evaluated", len(queries), len(names))
}

// PromLabelValues is every value label has in the Prometheus at prom.
func PromLabelValues(ctx context.Context, prom, label string) (map[string]bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, prom+"/api/v1/label/"+label+"/values", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("label values of %s: %w", label, err)
	}
	defer resp.Body.Close()
	var out struct {
		Data []string `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, fmt.Errorf("label values of %s: %w", label, err)
	}
	values := map[string]bool{}
	for _, n := range out.Data {
		values[n] = true
	}
	return values, nil
}

// PromQuery evaluates expr now and returns how many series (or a scalar)
// came back.
func PromQuery(ctx context.Context, prom, expr string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, prom+"/api/v1/query?query="+url.QueryEscape(expr), nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var out struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return 0, err
	}
	if out.Status != "success" {
		return 0, fmt.Errorf("query failed: %s", out.Error)
	}
	return len(out.Data.Result), nil
}
