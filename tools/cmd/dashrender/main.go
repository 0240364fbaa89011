// Command dashrender draws dashboards/*.json to PNGs from a Prometheus
// server's data (tools/dashrender). tests/dashboards runs it on the data
// its live services produced; docs/dashboards.md shows the result.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/warmpath/warmpath/tools/dashrender"
)

func main() {
	prom := flag.String("prometheus", "http://127.0.0.1:9090", "Prometheus base URL")
	dir := flag.String("dashboards", "dashboards", "directory of dashboard JSON files")
	out := flag.String("out", "docs/dashboards", "directory the PNGs go to")
	window := flag.Duration("window", 2*time.Minute, "time range drawn, ending now")
	rate := flag.String("rate-interval", "20s", "what $__rate_interval becomes")
	flag.Parse()
	if err := run(*prom, *dir, *out, *window, *rate); err != nil {
		fmt.Fprintln(os.Stderr, "dashrender:", err)
		os.Exit(1)
	}
}

func run(prom, dir, out string, window time.Duration, rate string) error {
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil || len(files) == 0 {
		return fmt.Errorf("no dashboards in %s", dir)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	end := time.Now()
	o := dashrender.Options{Prometheus: prom, Start: end.Add(-window), End: end, Step: time.Second, RateInterval: rate}
	for _, f := range files {
		png := filepath.Join(out, strings.TrimSuffix(filepath.Base(f), ".json")+".png")
		n, err := dashrender.Render(context.Background(), f, png, o)
		if err != nil {
			return err
		}
		fmt.Printf("%s: %d panels with data\n", png, n)
	}
	return nil
}
