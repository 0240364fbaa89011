package routerscale

import (
	"strings"
	"testing"
)

func TestParseGauges(t *testing.T) {
	page := `# HELP go_memstats_heap_alloc_bytes Number of heap bytes allocated and currently in use.
# TYPE go_memstats_heap_alloc_bytes gauge
go_memstats_heap_alloc_bytes 1.2345678e+07
go_memstats_heap_inuse_bytes 2.0e+07
go_memstats_heap_alloc_bytes_total{x="y"} 9
`
	for _, tc := range []struct {
		name  string
		names []string
		want  map[string]int64
		ok    bool
	}{
		{"both gauges", []string{"go_memstats_heap_alloc_bytes", "go_memstats_heap_inuse_bytes"},
			map[string]int64{"go_memstats_heap_alloc_bytes": 12345678, "go_memstats_heap_inuse_bytes": 20000000}, true},
		{"missing gauge", []string{"go_memstats_heap_sys_bytes"}, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseGauges(strings.NewReader(page), tc.names...)
			if (err == nil) != tc.ok {
				t.Fatalf("err %v, want ok %v", err, tc.ok)
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Fatalf("%s = %d, want %d", k, got[k], v)
				}
			}
		})
	}
}

func TestCompare(t *testing.T) {
	rows := []Row{
		{Workers: 8, Strategy: "roundrobin", CPUPerRequestUs: 100, HeapAllocBytes: 10},
		{Workers: 8, Strategy: "kvaware", CPUPerRequestUs: 150, HeapAllocBytes: 40},
		{Workers: 128, Strategy: "roundrobin", CPUPerRequestUs: 200, HeapAllocBytes: 20},
		{Workers: 128, Strategy: "kvaware", CPUPerRequestUs: 300, HeapAllocBytes: 60},
		{Workers: 32, Strategy: "prefixaware", CPUPerRequestUs: 120, HeapAllocBytes: 0},
	}
	Compare(rows)
	for _, tc := range []struct {
		i                int
		vsRR, vsSmallest float64 // 0: no ratio
		heapVsSmallest   float64
	}{
		{0, 1, 1, 1},
		{1, 1.5, 1, 1},
		{2, 1, 2, 2},
		{3, 1.5, 2, 1.5},
		{4, 0, 1, 0}, // no round robin at 32 workers, no heap reading
	} {
		r := rows[tc.i]
		for _, c := range []struct {
			name string
			got  *float64
			want float64
		}{{"vs roundrobin", r.CPUxRoundRobin, tc.vsRR}, {"vs smallest", r.CPUxSmallest, tc.vsSmallest}, {"heap vs smallest", r.HeapxSmallest, tc.heapVsSmallest}} {
			if (c.got == nil) != (c.want == 0) || (c.got != nil && *c.got != c.want) {
				t.Errorf("row %d (%d %s) %s: %v, want %g", tc.i, r.Workers, r.Strategy, c.name, c.got, c.want)
			}
		}
	}
}
