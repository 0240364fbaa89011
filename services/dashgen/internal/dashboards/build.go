package dashboards

import (
	"encoding/json"
	"fmt"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/variants"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/stat"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

// datasource is the dashboards' Prometheus, chosen by the $datasource
// variable.
func datasource() common.DataSourceRef {
	t, uid := "prometheus", "${datasource}"
	return common.DataSourceRef{Type: &t, Uid: &uid}
}

// Build turns a spec into the SDK's dashboard.
func Build(d Dashboard) (dashboard.Dashboard, error) {
	b := dashboard.NewDashboardBuilder(d.Title).
		Uid(d.UID).
		Description(d.Description).
		Tags([]string{"warmpath"}).
		Editable().
		Tooltip(dashboard.DashboardCursorSyncCrosshair).
		Refresh("30s").
		Time("now-1h", "now").
		Timezone(common.TimeZoneBrowser).
		WithVariable(dashboard.NewDatasourceVariableBuilder("datasource").Label("Data source").Type("prometheus")).
		WithVariable(labelVariable("namespace", "Namespace", "warmpath_router_workers", "")).
		WithVariable(labelVariable("endpoint", "Endpoint", "warmpath_router_workers", `namespace=~"$namespace"`)).
		WithVariable(labelVariable("model", "Model", "vllm:num_requests_running", `namespace=~"$namespace", endpoint=~"$endpoint"`).
			Definition("label_values(vllm:num_requests_running, model_name)"))
	for _, in := range d.Inputs {
		b = b.WithVariable(textbox(in))
	}
	for _, row := range d.Rows {
		b = b.WithRow(dashboard.NewRowBuilder(row.Title))
		for _, p := range row.Panels {
			b = b.WithPanel(panel(p))
		}
	}
	return b.Build()
}

// labelVariable is a multi-value variable over a label's values, "All"
// matching everything (including series without the label).
func labelVariable(name, label, metric, matchers string) *dashboard.QueryVariableBuilder {
	labelName := name
	if name == "model" {
		labelName = "model_name"
	}
	q := fmt.Sprintf("label_values(%s{%s}, %s)", metric, matchers, labelName)
	if matchers == "" {
		q = fmt.Sprintf("label_values(%s, %s)", metric, labelName)
	}
	return dashboard.NewQueryVariableBuilder(name).
		Label(label).
		Query(dashboard.StringOrMap{String: &q}).
		Definition(q).
		Datasource(datasource()).
		Refresh(dashboard.VariableRefreshOnTimeRangeChanged).
		Sort(dashboard.VariableSortAlphabeticalAsc).
		Multi(true).
		IncludeAll(true).
		AllValue(".*")
}

// textbox is an input the viewer can overwrite, e.g. their GPU price.
func textbox(in Input) *dashboard.TextBoxVariableBuilder {
	v := in.Default
	return dashboard.NewTextBoxVariableBuilder(in.Name).
		Label(in.Label).
		Description(in.Description).
		DefaultValue(dashboard.StringOrMap{String: &v}).
		Current(dashboard.VariableOption{
			Text:  dashboard.StringOrArrayOfString{String: &v},
			Value: dashboard.StringOrArrayOfString{String: &v},
		})
}

func targets(qs []Query) []cog.Builder[variants.Dataquery] {
	var out []cog.Builder[variants.Dataquery]
	for i, q := range qs {
		t := prometheus.NewDataqueryBuilder().Expr(q.Expr).RefId(string(rune('A' + i))).Datasource(datasource())
		if q.Legend != "" {
			t = t.LegendFormat(q.Legend)
		}
		out = append(out, t)
	}
	return out
}

func panel(p Panel) cog.Builder[dashboard.Panel] {
	width := uint32(12)
	if p.Width > 0 {
		width = uint32(p.Width)
	}
	switch p.Kind {
	case Stat:
		b := stat.NewPanelBuilder().Title(p.Title).Description(p.Description).Unit(p.Unit).
			Datasource(datasource()).Span(width).Height(4).GraphMode(common.BigValueGraphModeArea).
			ReduceOptions(common.NewReduceDataOptionsBuilder().Calcs([]string{"lastNotNull"}))
		if p.Min != nil {
			b = b.Min(*p.Min)
		}
		if p.Max != nil {
			b = b.Max(*p.Max)
		}
		for _, t := range targets(p.Queries) {
			b = b.WithTarget(t)
		}
		return b
	default:
		b := timeseries.NewPanelBuilder().Title(p.Title).Description(p.Description).Unit(p.Unit).
			Datasource(datasource()).Span(width).Height(8)
		if p.AxisLabel != "" {
			b = b.AxisLabel(p.AxisLabel)
		}
		if p.Min != nil {
			b = b.Min(*p.Min)
		}
		if p.Max != nil {
			b = b.Max(*p.Max)
		}
		for _, t := range targets(p.Queries) {
			b = b.WithTarget(t)
		}
		return b
	}
}

// Render returns a dashboard's JSON as committed under dashboards/.
func Render(d Dashboard) ([]byte, error) {
	built, err := Build(d)
	if err != nil {
		return nil, fmt.Errorf("dashboards: build %s: %w", d.UID, err)
	}
	b, err := json.MarshalIndent(built, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("dashboards: encode %s: %w", d.UID, err)
	}
	return append(b, '\n'), nil
}
