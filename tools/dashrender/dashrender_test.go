package dashrender

import (
	"encoding/json"
	"testing"
)

// TestAxis: every unit the dashboards use reads in words, scaled as
// Grafana shows it, and no raw unit id reaches an axis.
func TestAxis(t *testing.T) {
	for _, tc := range []struct {
		unit   string
		peak   float64
		label  string
		factor float64
	}{
		{"s", 0.25, "ms", 1000},
		{"percentunit", 0.9, "%", 100},
		{"reqps", 3, "req/s", 1},
		{"ops", 3, "ops/s", 1},
		{"tokens/s", 100, "tokens/s", 1},
		{"currencyUSD", 0.01, "$", 1},
		{"none", 2, "", 1},
		{"short", 2, "", 1},
		{"bytes", 512, "bytes", 1},
		{"bytes", 64 << 20, "MiB", 1.0 / (1 << 20)},
		{"Bps", 3 << 20, "MiB/s", 1.0 / (1 << 20)},
		{"Bps", 2 << 10, "KiB/s", 1.0 / (1 << 10)},
		{"Bps", 0, "bytes/s", 1},
	} {
		label, factor := axis(tc.unit, tc.peak)
		if label != tc.label || factor != tc.factor {
			t.Errorf("axis(%q, %g) = %q, %g; want %q, %g", tc.unit, tc.peak, label, factor, tc.label, tc.factor)
		}
	}
}

// TestLegend: a format names the series from its labels; without one the
// series' own labels, or the panel title, stand in — never "value".
func TestLegend(t *testing.T) {
	for _, tc := range []struct {
		format string
		labels map[string]string
		want   string
	}{
		{"{{strategy}} → {{worker}}", map[string]string{"strategy": "kvaware", "worker": "w1"}, "kvaware → w1"},
		{"HTTP {{ code }}", map[string]string{"code": "404"}, "HTTP 404"},
		{"", map[string]string{"tier": "memory", "__name__": "x"}, `{tier="memory"}`},
		{"", map[string]string{"b": "2", "a": "1"}, `{a="1", b="2"}`},
		{"", nil, "Panel"},
		{"{{worker}}", map[string]string{}, "Panel"},
	} {
		if got := legend(tc.format, tc.labels, "Panel"); got != tc.want {
			t.Errorf("legend(%q, %v) = %q, want %q", tc.format, tc.labels, got, tc.want)
		}
	}
}

// TestExpander: textbox inputs take the value they ship with, so a cost
// query runs at the dashboard's default price; a panel's axis limits are
// read with it.
func TestExpander(t *testing.T) {
	raw := `{"panels":[{"fieldConfig":{"defaults":{"unit":"percentunit","min":0,"max":1}}}],"templating":{"list":[{"type":"query","name":"namespace","query":"label_values(x, namespace)"},
		{"type":"textbox","name":"gpu_hour_price","query":"3.78"},{"type":"constant","name":"k","query":"2"}]}}`
	var d dashboardJSON
	if err := json.Unmarshal([]byte(raw), &d); err != nil {
		t.Fatal(err)
	}
	got := d.expander("20s").Replace(`$gpu_hour_price * $k * rate(x{namespace=~"$namespace"}[$__rate_interval])`)
	if want := `3.78 * 2 * rate(x{namespace=~".*"}[20s])`; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
	if lim := d.Panels[0].FieldConfig.Defaults; lim.Min == nil || *lim.Min != 0 || lim.Max == nil || *lim.Max != 1 {
		t.Errorf("axis limits not read: %+v", lim)
	}
}

// TestBound: a panel's min and max scale with its unit, and a flat line
// still gets a visible range.
func TestBound(t *testing.T) {
	zero, one := 0.0, 1.0
	for _, tc := range []struct {
		name           string
		lo, hi         *float64
		factor         float64
		dataLo, dataHi float64
		wantLo, wantHi float64
	}{
		{"ratio as percent", &zero, &one, 100, 0.2, 0.3, 0, 100},
		{"floor only", &zero, nil, 1, 2, 5, 0, 5},
		{"flat zero", &zero, nil, 100, 0, 0, 0, 1},
		{"unbounded", nil, nil, 1, 2, 5, 2, 5},
	} {
		pl := newPlot("p", "")
		pl.Y.Min, pl.Y.Max = tc.dataLo, tc.dataHi
		bound(pl, tc.lo, tc.hi, tc.factor)
		if pl.Y.Min != tc.wantLo || pl.Y.Max != tc.wantHi {
			t.Errorf("%s: %g..%g, want %g..%g", tc.name, pl.Y.Min, pl.Y.Max, tc.wantLo, tc.wantHi)
		}
	}
}
