package controller

import (
	"testing"
)

// TestWorkerWaitsForEndpointsBeforeStopping: a worker pod being removed
// keeps serving for a few seconds before it is sent SIGTERM, so the routers
// (watching EndpointSlices) stop sending it requests first. Without it, the
// e2e suite's scale-down saw a request reach a worker in the tens of
// milliseconds between its SIGTERM and the router dropping it: a 502.
func TestWorkerWaitsForEndpointsBeforeStopping(t *testing.T) {
	pod := workerDeployment(routed(), Options{}).Spec.Template.Spec
	pre := pod.Containers[0].Lifecycle
	if pre == nil || pre.PreStop == nil || pre.PreStop.Sleep == nil || pre.PreStop.Sleep.Seconds < workerDrainSeconds {
		t.Fatalf("worker preStop = %+v, want a sleep of %d s", pre, workerDrainSeconds)
	}
	if g := pod.TerminationGracePeriodSeconds; g == nil || *g <= workerDrainSeconds {
		t.Fatalf("termination grace %v must exceed the %d s preStop sleep", g, workerDrainSeconds)
	}
}
