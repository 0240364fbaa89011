// Command dashgen writes warmpath's Grafana dashboards (make dashboards).
// With --check it writes nothing and fails when a committed file differs
// from what it would write.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/warmpath/warmpath/services/dashgen/internal/dashboards"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "dashgen:", err)
		os.Exit(1)
	}
}

func run() error {
	out := flag.String("out", "dashboards", "directory the JSON files go to")
	check := flag.Bool("check", false, "write nothing; fail when a committed file is stale")
	flag.Parse()
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	for _, d := range dashboards.All() {
		b, err := dashboards.Render(d)
		if err != nil {
			return err
		}
		path := filepath.Join(*out, d.File)
		if *check {
			have, err := os.ReadFile(path)
			if err != nil || !bytes.Equal(have, b) {
				return fmt.Errorf("%s is stale: run make dashboards", path)
			}
			continue
		}
		if err := os.WriteFile(path, b, 0o644); err != nil { //nolint:gosec // committed, world-readable JSON
			return err
		}
		fmt.Println("wrote", path)
	}
	return nil
}
