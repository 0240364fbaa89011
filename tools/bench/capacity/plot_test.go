package capacity

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestPlotsTwoPerGroup(t *testing.T) {
	probes := func(rps ...float64) *Search {
		s := &Search{Outcome: Bracketed}
		for i, r := range rps {
			s.Probes = append(s.Probes, Probe{Factor: float64(i + 1), OfferedRPS: r, WithinSLORPS: r * 0.9, TTFTP90ms: 500 * r, Pass: i == 0})
		}
		return s
	}
	curves := []Curve{
		{Workload: "w", Workers: 8, SLOms: 2000, Strategy: "roundrobin", Cache: "GPU", Search: probes(1, 2), Goodput: Probe{OfferedRPS: 1}},
		{Workload: "w", Workers: 8, SLOms: 2000, Strategy: "kvaware", Cache: "GPU+L1+L2", Search: probes(2, 4), Goodput: Probe{OfferedRPS: 2}},
		{Workload: "w", Workers: 32, SLOms: 2000, Strategy: "kvaware", Cache: "GPU", Search: &Search{Outcome: Unattainable}},
	}
	rows := Rows(curves, Price{USDPerGPUHour: 3.78}, Baselines{Strategy: "roundrobin", GPU: "GPU"})
	for _, tc := range []struct {
		name  string
		rows  []Row
		files []string // nil: an error
	}{
		{"two groups", rows, []string{"capacity_cost_w_32w_2000ms.png", "capacity_cost_w_8w_2000ms.png", "capacity_w_32w_2000ms.png", "capacity_w_8w_2000ms.png"}},
		{"rows not the curves'", rows[:1], nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			paths, err := Plots(dir, curves, tc.rows)
			if tc.files == nil {
				if err == nil {
					t.Fatal("plots drawn from rows of other curves")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, p := range paths {
				st, err := os.Stat(p)
				if err != nil || st.Size() == 0 {
					t.Fatalf("%s: %v, %v", p, st, err)
				}
				names = append(names, filepath.Base(p))
			}
			slices.Sort(names)
			if !slices.Equal(names, tc.files) {
				t.Fatalf("wrote %v, want %v", names, tc.files)
			}
		})
	}
}
