package controller

import (
	"fmt"
	"maps"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/utils/ptr"
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

// TestRouterRollsWithoutLosingRequests: a router pod being replaced drains
// (readiness fails, connections close after their response) for longer
// than endpoint changes take to reach kube-proxy, then gives requests in
// flight a grace that ends before the kubelet's SIGKILL; a rollout starts
// the new pod and waits for it to be Ready before stopping an old one.
func TestRouterRollsWithoutLosingRequests(t *testing.T) {
	d := routerDeployment(routed(), Options{})
	args := strings.Join(d.Spec.Template.Spec.Containers[0].Args, " ")
	drain := fmt.Sprintf("--drain-delay=%ds", routerDrainSeconds)
	grace := fmt.Sprintf("--shutdown-grace=%ds", routerShutdownGraceSeconds)
	if !strings.Contains(args, drain) || !strings.Contains(args, grace) {
		t.Errorf("router args %s lack %s and %s", args, drain, grace)
	}
	if routerDrainSeconds < workerDrainSeconds {
		t.Errorf("router drain %d s is shorter than the workers' %d s: the time endpoint changes take to propagate", routerDrainSeconds, workerDrainSeconds)
	}
	if g := d.Spec.Template.Spec.TerminationGracePeriodSeconds; g == nil || *g <= routerDrainSeconds+routerShutdownGraceSeconds {
		t.Errorf("termination grace %v must exceed the drain %d s plus the shutdown grace %d s", g, routerDrainSeconds, routerShutdownGraceSeconds)
	}
	s := d.Spec.Strategy
	if s.Type != appsv1.RollingUpdateDeploymentStrategyType || s.RollingUpdate == nil ||
		s.RollingUpdate.MaxUnavailable.String() != "0" || s.RollingUpdate.MaxSurge.String() != "1" {
		t.Errorf("router strategy %+v, want a rolling update with maxUnavailable 0 and maxSurge 1", s)
	}
}

// TestDisruptionBudgets: voluntary disruptions (a node drain) take at most
// one router and one worker at a time, and never block on a single
// replica (a maxUnavailable budget allows one eviction at any size, where
// minAvailable 1 of 1 would block the drain for ever); a pod that is not
// Ready is evictable whatever the budget, so a crash-looping pod cannot
// block a drain either.
func TestDisruptionBudgets(t *testing.T) {
	for _, replicas := range []int32{1, 2, 5} {
		t.Run(fmt.Sprint(replicas, " replicas"), func(t *testing.T) {
			iec := routed()
			iec.Spec.Replicas = ptr.To(replicas)
			iec.Spec.IntelligentRoutingSpec.RouterReplicas = ptr.To(replicas)
			for _, pdb := range []*policyv1.PodDisruptionBudget{workerPDB(iec), routerPDB(iec)} {
				sp := pdb.Spec
				if sp.MinAvailable != nil || sp.MaxUnavailable == nil || sp.MaxUnavailable.String() != "1" {
					t.Errorf("%s: minAvailable %v, maxUnavailable %v; want maxUnavailable 1 only", pdb.Name, sp.MinAvailable, sp.MaxUnavailable)
				}
				if p := sp.UnhealthyPodEvictionPolicy; p == nil || *p != policyv1.AlwaysAllow {
					t.Errorf("%s: unhealthyPodEvictionPolicy %v, want AlwaysAllow", pdb.Name, p)
				}
			}
			if got, want := routerPDB(iec).Spec.Selector.MatchLabels, selectorLabels(iec, componentRouter); !maps.Equal(got, want) {
				t.Errorf("router PDB selects %v, want the router pods %v", got, want)
			}
		})
	}
}
