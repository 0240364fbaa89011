package probe

import (
	"testing"
)

func TestParseMetrics(t *testing.T) {
	body := []byte(`# HELP vllm:num_requests_running x
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3
vllm:num_requests_running{engine="1",model_name="m"} 2
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 4
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.5
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",num_gpu_blocks="1000",enable_prefix_caching="True"} 1
`)
	s, err := ParseMetrics(body)
	if err != nil {
		t.Fatal(err)
	}
	if s.Running != 5 || s.Waiting != 4 || s.KVCacheUsage != 0.5 || s.BlockSize != 16 || s.NumGPUBlocks != 1000 {
		t.Fatalf("got %+v", s)
	}
	legacy, err := ParseMetrics([]byte("vllm:gpu_cache_usage_perc 0.75\n"))
	if err != nil || legacy.KVCacheUsage != 0.75 {
		t.Fatalf("legacy gauge: %+v %v", legacy, err)
	}
	if _, err := ParseMetrics([]byte("not { metrics")); err == nil {
		t.Fatal("garbage parsed")
	}
}

// FuzzParseMetrics: worker /metrics bodies are untrusted input.
func FuzzParseMetrics(f *testing.F) {
	f.Add([]byte("vllm:num_requests_running 1\n"))
	f.Add([]byte(`vllm:cache_config_info{block_size="16",num_gpu_blocks="x"} 1` + "\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = ParseMetrics(b)
	})
}
