package dashboards

import (
	"fmt"
	"slices"
	"strings"

	"github.com/prometheus/prometheus/promql/parser"
)

// Names returns every metric name the dashboards query, sorted.
func Names() ([]string, error) {
	seen := map[string]bool{}
	for _, d := range All() {
		vars := Expander(d)
		for _, row := range d.Rows {
			for _, p := range row.Panels {
				for _, q := range p.Queries {
					expr, err := parser.NewParser(parser.Options{}).ParseExpr(vars.Replace(q.Expr))
					if err != nil {
						return nil, fmt.Errorf("%s / %s: %w", d.Title, p.Title, err)
					}
					parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
						if vs, ok := n.(*parser.VectorSelector); ok && vs.Name != "" {
							seen[vs.Name] = true
						}
						return nil
					})
				}
			}
		}
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	slices.Sort(out)
	return out, nil
}

// Expander does to d's queries what Grafana does with its variables when
// "All" is selected and every input holds its default, so a query can be
// parsed and evaluated as it would run.
func Expander(d Dashboard) *strings.Replacer {
	pairs := []string{"$__rate_interval", "1m", "$namespace", ".*", "$endpoint", ".*", "$model", ".*"}
	for _, in := range d.Inputs {
		pairs = append(pairs, "$"+in.Name, in.Default)
	}
	return strings.NewReplacer(pairs...)
}
