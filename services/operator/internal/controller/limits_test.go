package controller

import (
	"testing"

	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/warmpath/warmpath/services/operator/api/v1alpha1"
)

// TestRequestLimitsAreTheEndpoints: requestLimits bound the endpoint, not
// each router pod, so the operator gives each of N routers 1/N of them,
// rounded down so that together they never admit more than the limit.
func TestRequestLimitsAreTheEndpoints(t *testing.T) {
	tests := []struct {
		name                string
		replicas            *int32
		concurrent, queue   int32
		wantConc, wantQueue int
	}{
		{"one router holds the whole limit", nil, 64, 128, 64, 128},
		{"divides evenly", ptr.To[int32](4), 64, 128, 16, 32},
		{"rounds down: 3 x 3 <= 10", ptr.To[int32](3), 10, 5, 3, 1},
		{"never below one slot", ptr.To[int32](5), 3, 2, 1, 1},
		{"unlimited stays unlimited", ptr.To[int32](3), 0, 0, 0, 0},
		{"no queue stays no queue", ptr.To[int32](2), 8, 0, 4, 0},
		{"zero routers: nothing to divide among", ptr.To[int32](0), 8, 8, 8, 8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			iec := &v1alpha1.InferenceEndpointConfig{}
			iec.Spec.IntelligentRoutingSpec.RouterReplicas = tt.replicas
			iec.Spec.Worker.RequestLimits = &v1alpha1.RequestLimits{MaxConcurrentRequests: tt.concurrent, MaxQueueSize: tt.queue, OverflowStatusCode: 503}
			var got routerConfig
			if err := yaml.Unmarshal([]byte(routerConfigYAML(iec)), &got); err != nil {
				t.Fatal(err)
			}
			l := got.RequestLimits
			if l == nil || l.MaxConcurrentRequests != tt.wantConc || l.MaxQueueSize != tt.wantQueue || l.OverflowStatusCode != 503 {
				t.Fatalf("router requestLimits %+v, want %d concurrent, %d queued, 503", l, tt.wantConc, tt.wantQueue)
			}
		})
	}
}
