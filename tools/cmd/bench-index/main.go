// Command bench-index measures the kvaware index (tools/bench/indexbench)
// and writes bench/results/kv_index.json, printing it too (make bench-index).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"

	"github.com/warmpath/warmpath/tools/bench/indexbench"
	"github.com/warmpath/warmpath/tools/bench/report"
)

func main() {
	out := flag.String("out", "bench/results/kv_index.json", "report path")
	var cfg indexbench.Config
	flag.IntVar(&cfg.Blocks, "blocks", 1<<20, "blocks in the index")
	flag.IntVar(&cfg.Workers, "workers", 16, "workers holding them")
	flag.IntVar(&cfg.PromptBlocks, "prompt-blocks", 512, "blocks per looked-up prompt (8K tokens in blocks of 16)")
	flag.IntVar(&cfg.Lookups, "lookups", 20000, "lookups measured")
	flag.Parse()
	if err := run(*out, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "bench-index:", err)
		os.Exit(1)
	}
}

func run(out string, cfg indexbench.Config) error {
	rep := indexbench.Run(cfg)
	if err := report.WriteJSON(out, rep); err != nil {
		return err
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}
