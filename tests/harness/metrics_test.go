package harness

import "testing"

func TestSumSamples(t *testing.T) {
	const exposition = `# HELP vllm:prefix_cache_hits_total Prefix cache hits, in tokens.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 32
vllm:prefix_cache_hits_total{engine="1",model_name="m {x}"} 16 1700000000000
vllm:prefix_cache_hits_total_extra 1000
vllm:prefix_cache_queries_total{engine="0"} 64
`
	tests := []struct {
		name      string
		metric    string
		want      float64
		wantFound bool
	}{
		{"sums label sets, ignores timestamps and longer names", "vllm:prefix_cache_hits_total", 48, true},
		{"another metric", "vllm:prefix_cache_queries_total", 64, true},
		{"absent metric is zero and not found", "vllm:missing_total", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, found, err := SumSamples([]byte(exposition), tt.metric)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want || found != tt.wantFound {
				t.Errorf("SumSamples(%q) = %v, %v; want %v, %v", tt.metric, got, found, tt.want, tt.wantFound)
			}
		})
	}
}
