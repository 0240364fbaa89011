package controller_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/warmpath/warmpath/services/operator/api/v1alpha1"
	"github.com/warmpath/warmpath/services/operator/internal/controller"
)

// TestRouterReplicasChangeRedividesLimits: on a live endpoint, scaling the
// routers rewrites each one's share in the ConfigMap, which the routers
// reload, and leaves the router pod template alone (no restart).
func TestRouterReplicasChangeRedividesLimits(t *testing.T) {
	c := cluster(t)
	ns := namespace(t, c)
	iec := minimal(ns, "l")
	iec.Spec.IntelligentRoutingSpec.Enabled = ptr.To(true)
	iec.Spec.IntelligentRoutingSpec.RouterReplicas = ptr.To[int32](2)
	iec.Spec.Worker.RequestLimits = &v1alpha1.RequestLimits{MaxConcurrentRequests: 12, MaxQueueSize: 30}
	if err := c.Create(context.Background(), iec); err != nil {
		t.Fatal(err)
	}
	waitLimits := func(conc, queue int) {
		t.Helper()
		want := fmt.Sprintf("maxConcurrentRequests: %d\n  maxQueueSize: %d\n", conc, queue)
		eventually(t, "router ConfigMap holds "+want, func() error {
			var cm corev1.ConfigMap
			if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "l-router"}, &cm); err != nil {
				return err
			}
			if got := cm.Data[controller.RouterConfigKey]; !strings.Contains(got, want) {
				return fmt.Errorf("config is %q", got)
			}
			return nil
		})
	}
	waitLimits(6, 15)
	var before appsv1.Deployment
	get(t, c, ns, "l-router", &before)
	editSpec(t, c, iec, func(cur *v1alpha1.InferenceEndpointConfig) {
		cur.Spec.IntelligentRoutingSpec.RouterReplicas = ptr.To[int32](3)
	})
	waitLimits(4, 10)
	var after appsv1.Deployment
	eventually(t, "router Deployment at 3 replicas", func() error {
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "l-router"}, &after); err != nil {
			return err
		}
		if r := ptr.Deref(after.Spec.Replicas, 0); r != 3 {
			return fmt.Errorf("replicas %d", r)
		}
		return nil
	})
	if before.Generation+1 != after.Generation {
		t.Errorf("router Deployment generation %d -> %d, want one change (replicas)", before.Generation, after.Generation)
	}
	b, _ := yaml.Marshal(before.Spec.Template)
	a, _ := yaml.Marshal(after.Spec.Template)
	if string(a) != string(b) {
		t.Errorf("the router pod template changed with routerReplicas (a restart):\n%s\nwas:\n%s", a, b)
	}
}

// TestRouterReplicasFindEachOther: with several router replicas the
// operator gives them a headless peers Service and the flags to relay each
// request to the replica that owns its prompt (docs/router.md, "Router
// replicas"); a lone router gets neither flag.
func TestRouterReplicasFindEachOther(t *testing.T) {
	c := cluster(t)
	ns := namespace(t, c)
	for _, tc := range []struct {
		name     string
		replicas int32
		peered   bool
	}{
		{"one", 1, false},
		{"three", 3, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			iec := minimal(ns, "p"+tc.name)
			iec.Spec.IntelligentRoutingSpec.Enabled = ptr.To(true)
			iec.Spec.IntelligentRoutingSpec.RouterReplicas = ptr.To(tc.replicas)
			if err := c.Create(context.Background(), iec); err != nil {
				t.Fatal(err)
			}
			var d appsv1.Deployment
			eventually(t, "router Deployment", func() error {
				return c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: iec.Name + "-router"}, &d)
			})
			args := strings.Join(d.Spec.Template.Spec.Containers[0].Args, " ")
			wantDNS := "--peers-dns-name=" + iec.Name + "-router-peers." + ns + ".svc"
			if got := strings.Contains(args, wantDNS) && strings.Contains(args, "--peer-self=http://$(POD_IP):8080"); got != tc.peered {
				t.Errorf("peer flags present = %v, want %v: %s", got, tc.peered, args)
			}
			env := d.Spec.Template.Spec.Containers[0].Env
			if len(env) == 0 || env[0].Name != "POD_IP" || env[0].ValueFrom == nil || env[0].ValueFrom.FieldRef.FieldPath != "status.podIP" {
				t.Errorf("router env %v, want POD_IP from status.podIP", env)
			}
			var svc corev1.Service
			get(t, c, ns, iec.Name+"-router-peers", &svc)
			if svc.Spec.ClusterIP != corev1.ClusterIPNone || svc.Spec.PublishNotReadyAddresses {
				t.Errorf("peers Service: clusterIP %q, publishNotReadyAddresses %v; want headless, ready pods only", svc.Spec.ClusterIP, svc.Spec.PublishNotReadyAddresses)
			}
			if got := svc.Spec.Selector; got["app.kubernetes.io/component"] != "router" {
				t.Errorf("peers Service selects %v, want the router pods", got)
			}
		})
	}
}

// TestReplicasSayWhatTheyShare: a kvaware endpoint with three routers and
// fewer concurrent slots than routers reports both in its status — each
// router still takes one slot (not 0, unlimited), so the endpoint admits
// more than the limit (RequestLimitsHeld False, with a Warning event), and
// with no Redis to share, each router keeps its own kvaware index
// (KVIndexShared False). A Redis L2 then holds the routers' index too
// (their --kv-index-redis, from the environment), and back at one router
// neither condition is left.
func TestReplicasSayWhatTheyShare(t *testing.T) {
	c := cluster(t)
	ns := namespace(t, c)
	iec := minimal(ns, "h")
	iec.Spec.IntelligentRoutingSpec.Enabled = ptr.To(true)
	iec.Spec.IntelligentRoutingSpec.RoutingStrategy = v1alpha1.StrategyKVAware
	iec.Spec.IntelligentRoutingSpec.RouterReplicas = ptr.To[int32](3)
	iec.Spec.Worker.RequestLimits = &v1alpha1.RequestLimits{MaxConcurrentRequests: 2}
	if err := c.Create(context.Background(), iec); err != nil {
		t.Fatal(err)
	}
	condition := func(typ string, want metav1.ConditionStatus, reason string) {
		t.Helper()
		waitStatus(t, c, iec, fmt.Sprintf("%s %s/%s", typ, want, reason), func(cur *v1alpha1.InferenceEndpointConfig) error {
			cond := meta.FindStatusCondition(cur.Status.Conditions, typ)
			switch {
			case want == "" && cond != nil:
				return fmt.Errorf("%s still present: %+v", typ, cond)
			case want != "" && (cond == nil || cond.Status != want || cond.Reason != reason):
				return fmt.Errorf("%s is %+v", typ, cond)
			}
			return nil
		})
	}
	condition(v1alpha1.ConditionRequestLimitsHeld, metav1.ConditionFalse, controller.ReasonFewerSlotsThanRouters)
	condition(v1alpha1.ConditionKVIndexShared, metav1.ConditionFalse, controller.ReasonIndexPerReplica)
	eventually(t, "FewerSlotsThanRouters event", func() error { return findEvent(c, ns, "h", controller.ReasonFewerSlotsThanRouters) })

	editSpec(t, c, iec, func(cur *v1alpha1.InferenceEndpointConfig) {
		cur.Spec.KVCacheSpec.EnableL2Cache = ptr.To(true)
		cur.Spec.KVCacheSpec.L2CacheSpec = &v1alpha1.L2CacheSpec{L2CacheBackend: "redis", L2CacheLocalUrl: "redis://redis.db.svc:6379"}
	})
	condition(v1alpha1.ConditionKVIndexShared, metav1.ConditionTrue, controller.ReasonIndexInRedis)
	eventually(t, "the routers' index in the L2's Redis", func() error {
		var d appsv1.Deployment
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "h-router"}, &d); err != nil {
			return err
		}
		for _, e := range d.Spec.Template.Spec.Containers[0].Env {
			if e.Name == "WARMPATH_ROUTER_KV_INDEX_REDIS" && e.Value == "redis://redis.db.svc:6379" {
				return nil
			}
		}
		return fmt.Errorf("router env %+v", d.Spec.Template.Spec.Containers[0].Env)
	})

	editSpec(t, c, iec, func(cur *v1alpha1.InferenceEndpointConfig) {
		cur.Spec.IntelligentRoutingSpec.RouterReplicas = ptr.To[int32](1)
	})
	condition(v1alpha1.ConditionRequestLimitsHeld, "", "")
	condition(v1alpha1.ConditionKVIndexShared, "", "")
}
