// Command bench-l2 measures warmpath's cache server against Redis, over
// RESP and lm://, next to a raw TCP ceiling (tools/bench/l2bench). It
// writes bench/results/l2_throughput.json and prints it (make bench-l2).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/warmpath/warmpath/tools/bench/l2bench"
	"github.com/warmpath/warmpath/tools/bench/report"
)

func main() {
	out := flag.String("out", "bench/results/l2_throughput.json", "report path")
	dur := flag.Duration("duration", 8*time.Second, "measured time per target and value size")
	conns := flag.Int("conns", 8, "concurrent connections")
	flag.Parse()
	if err := run(*out, l2bench.Config{Duration: *dur, Conns: *conns, Progress: os.Stderr}); err != nil {
		fmt.Fprintln(os.Stderr, "bench-l2:", err)
		os.Exit(1)
	}
}

func run(out string, cfg l2bench.Config) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := l2bench.Run(ctx, cfg)
	if err != nil {
		return err
	}
	if err := report.WriteJSON(out, rep); err != nil {
		return err
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}
