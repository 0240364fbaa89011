package dashboards

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/prometheus/prometheus/promql/parser"
)

// committed is the repository's dashboards/ directory.
var committed = filepath.Join("..", "..", "..", "..", "dashboards")

// TestCommittedJSONIsCurrent fails when dashboards/*.json differ from what
// the generator writes: run `make dashboards`.
func TestCommittedJSONIsCurrent(t *testing.T) {
	for _, d := range All() {
		want, err := Render(d)
		if err != nil {
			t.Fatal(err)
		}
		have, err := os.ReadFile(filepath.Join(committed, d.File))
		if err != nil {
			t.Fatalf("%v (run make dashboards)", err)
		}
		if string(have) != string(want) {
			t.Errorf("dashboards/%s is stale: run make dashboards", d.File)
		}
	}
}

// TestGrafanaLoadsThem: each committed file unmarshals back through the
// SDK's types, with the uid, title and schema version the generator sets.
func TestGrafanaLoadsThem(t *testing.T) {
	plugins.RegisterDefaultPlugins()
	uids := map[string]bool{}
	for _, d := range All() {
		raw, err := os.ReadFile(filepath.Join(committed, d.File))
		if err != nil {
			t.Fatal(err)
		}
		var got dashboard.Dashboard
		if err := json.Unmarshal(raw, &got); err != nil {
			t.Fatalf("%s: %v", d.File, err)
		}
		if got.Uid == nil || *got.Uid != d.UID || got.Title == nil || *got.Title != d.Title || got.SchemaVersion != 42 {
			t.Errorf("%s: uid %v title %v schemaVersion %d", d.File, got.Uid, got.Title, got.SchemaVersion)
		}
		if uids[d.UID] {
			t.Errorf("uid %s used twice", d.UID)
		}
		uids[d.UID] = true
		var vars []string
		for _, v := range got.Templating.List {
			vars = append(vars, v.Name)
		}
		want := []string{"datasource", "namespace", "endpoint", "model"}
		for _, in := range d.Inputs {
			want = append(want, in.Name)
		}
		if strings.Join(vars, ",") != strings.Join(want, ",") {
			t.Errorf("%s: variables %v, want %v", d.File, vars, want)
		}
	}
}

// TestQueriesParse: every panel query parses with Prometheus's own parser
// once Grafana has expanded its variables, and every panel is described.
// Every query has a legend, so no line is drawn as a bare label set.
func TestQueriesParse(t *testing.T) {
	for _, d := range All() {
		vars := Expander(d)
		for _, row := range d.Rows {
			for _, p := range row.Panels {
				if p.Description == "" || p.Unit == "" {
					t.Errorf("%s / %s: a panel needs a description and a unit", d.Title, p.Title)
				}
				for _, q := range p.Queries {
					if q.Legend == "" {
						t.Errorf("%s / %s: %q has no legend", d.Title, p.Title, q.Expr)
					}
					if strings.Contains(vars.Replace(q.Expr), "$") {
						t.Errorf("%s / %s: %q uses a variable the dashboard lacks", d.Title, p.Title, q.Expr)
					}
					if _, err := parser.NewParser(parser.Options{}).ParseExpr(vars.Replace(q.Expr)); err != nil {
						t.Errorf("%s / %s: %q: %v", d.Title, p.Title, q.Expr, err)
					}
				}
			}
		}
	}
}

// TestMetricNames: the names the queries use, as Names reports them, are
// the ones the integration test checks against live services.
func TestMetricNames(t *testing.T) {
	names, err := Names()
	if err != nil {
		t.Fatal(err)
	}
	valid := regexp.MustCompile(`^(warmpath_(router|cache)_|vllm:|lmcache:)[a-z0-9_:]+$`)
	for _, n := range names {
		if !valid.MatchString(n) {
			t.Errorf("unexpected metric name %q", n)
		}
	}
	if len(names) < 30 {
		t.Errorf("only %d metric names: %v", len(names), names)
	}
}
