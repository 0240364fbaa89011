package timing

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// WriteTable prints each preset's derived figures — the numbers
// docs/simulator.md quotes — as an aligned table.
func WriteTable(w io.Writer, blockSize int, memUtil float64) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "preset\tKV bytes/token\tprefill 1K\tprefill 8K\tdecode b=1\tdecode b=64 ctx 2K\tL1 load 8K\tGPU blocks")
	for _, name := range Names() {
		p, err := Lookup(name)
		if err != nil {
			return err
		}
		m, err := NewModel(p)
		if err != nil {
			return err
		}
		batch := make([]int, 64)
		for i := range batch {
			batch[i] = 2048
		}
		fmt.Fprintf(tw, "%s\t%d\t%.1f ms\t%.1f ms\t%.2f ms\t%.2f ms\t%.1f ms\t%d\n", name, p.KVBytesPerToken(),
			m.PrefillSeconds(0, 1000)*1e3, m.PrefillSeconds(0, 8192)*1e3,
			m.StepSeconds(Batch{DecodeContexts: []int{1000}})*1e3, m.StepSeconds(Batch{DecodeContexts: batch})*1e3,
			m.LoadSeconds(TierCPU, 8192)*1e3, m.NumGPUBlocks(blockSize, memUtil))
	}
	return tw.Flush()
}
