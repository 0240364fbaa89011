package controller_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	v1alpha1 "github.com/warmpath/warmpath/services/operator/api/v1alpha1"
	"github.com/warmpath/warmpath/services/operator/internal/controller"
)

// autoscaled is a routed endpoint scaling on all three targets.
func autoscaled(ns, name string) *v1alpha1.InferenceEndpointConfig {
	iec := minimal(ns, name)
	iec.Spec.Replicas = ptr.To[int32](2)
	iec.Spec.IntelligentRoutingSpec.Enabled = ptr.To(true)
	iec.Spec.AutoScalingSpec = &v1alpha1.AutoScalingSpec{
		MinReplicaCount: ptr.To[int32](2), MaxReplicaCount: ptr.To[int32](6),
		ScaleDownStabilizationTime: ptr.To[int32](600),
		PrometheusServerAddress:    "http://prometheus.monitoring.svc:9090",
		Targets: &v1alpha1.AutoScalingTargets{
			WaitingRequestsPerWorker: ptr.To[int32](4), KVCacheUsagePercent: ptr.To[int32](80), RouterTTFTMilliseconds: ptr.To[int32](1500),
		},
	}
	return iec
}

// workerReplicas reads the worker Deployment's spec.replicas.
func workerReplicas(t *testing.T, c client.Client, ns, name string) int32 {
	t.Helper()
	var d appsv1.Deployment
	get(t, c, ns, name+"-worker", &d)
	return ptr.Deref(d.Spec.Replicas, -1)
}

// setWorkerReplicasAsAutoscaler changes the worker count through the
// Deployment's scale subresource, as the HPA controller does.
func setWorkerReplicasAsAutoscaler(t *testing.T, c client.Client, ns, name string, n int32) {
	t.Helper()
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-worker"}}
	scale := &autoscalingv1.Scale{Spec: autoscalingv1.ScaleSpec{Replicas: n}}
	eventually(t, fmt.Sprintf("scaling %s to %d", d.Name, n), func() error {
		patch := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, n))
		return c.SubResource("scale").Patch(context.Background(), d, patch, client.WithSubResourceBody(scale), client.FieldOwner("horizontal-pod-autoscaler"))
	})
}

// TestAutoscaling walks one endpoint through the autoscaler's life: an
// HPA while KEDA is absent, the operator keeping its hands off the worker
// count, the endpoint's own scale subresource, KEDA installed (a
// ScaledObject replaces the HPA), and autoscaling removed (the operator
// owns the count again). KEDA's CRD stays installed for the rest of the
// package's tests, so this is the only test that needs it absent.
func TestAutoscaling(t *testing.T) {
	c := cluster(t)
	ns := namespace(t, c)
	ctx := context.Background()
	iec := autoscaled(ns, "as")
	if err := c.Create(ctx, iec); err != nil {
		t.Fatal(err)
	}

	// HPA path.
	var h autoscalingv2.HorizontalPodAutoscaler
	get(t, c, ns, "as-worker", &h)
	if ref := metav1.GetControllerOf(&h); ref == nil || ref.UID != iec.UID {
		t.Errorf("HPA controller reference %+v, want the endpoint", ref)
	}
	if h.Spec.ScaleTargetRef != (autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "as-worker"}) {
		t.Errorf("scaleTargetRef %+v", h.Spec.ScaleTargetRef)
	}
	if ptr.Deref(h.Spec.MinReplicas, 0) != 2 || h.Spec.MaxReplicas != 6 {
		t.Errorf("replicas %d..%d, want 2..6", ptr.Deref(h.Spec.MinReplicas, 0), h.Spec.MaxReplicas)
	}
	var got []string
	for _, m := range h.Spec.Metrics {
		switch m.Type {
		case autoscalingv2.PodsMetricSourceType:
			got = append(got, fmt.Sprintf("Pods %s avg %s", m.Pods.Metric.Name, m.Pods.Target.AverageValue))
		case autoscalingv2.ExternalMetricSourceType:
			got = append(got, fmt.Sprintf("External %s %v value %s", m.External.Metric.Name, m.External.Metric.Selector.MatchLabels, m.External.Target.Value))
		}
	}
	want := []string{
		"Pods vllm:num_requests_waiting avg 4",
		"Pods vllm:kv_cache_usage_perc avg 800m",
		"External warmpath_router_ttft_seconds_p90 map[endpoint:as] value 1500m",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("HPA metrics\n got %q\nwant %q", got, want)
	}
	if b := h.Spec.Behavior; b == nil || ptr.Deref(b.ScaleDown.StabilizationWindowSeconds, -1) != 600 || ptr.Deref(b.ScaleUp.StabilizationWindowSeconds, -1) != 0 {
		t.Errorf("behavior %+v, want scale-down window 600 s, scale-up 0", b)
	}
	autoscalingCond := func(status metav1.ConditionStatus, reason string) {
		t.Helper()
		waitStatus(t, c, iec, "AutoscalingReady "+reason, func(cur *v1alpha1.InferenceEndpointConfig) error {
			cond := meta.FindStatusCondition(cur.Status.Conditions, v1alpha1.ConditionAutoscalingReady)
			if cond == nil || cond.Status != status || cond.Reason != reason || cond.ObservedGeneration != cur.Generation {
				return fmt.Errorf("condition %+v", cond)
			}
			return nil
		})
	}
	autoscalingCond(metav1.ConditionTrue, "HorizontalPodAutoscaler")

	// The operator leaves the count to the autoscaler: a change behind
	// its back stays through reconciles (a spec change forces one, seen
	// done when the HPA follows it).
	if n := workerReplicas(t, c, ns, "as"); n != 2 {
		t.Errorf("worker replicas %d at creation, want the autoscaler's minimum 2", n)
	}
	setWorkerReplicasAsAutoscaler(t, c, ns, "as", 5)
	editSpec(t, c, iec, func(e *v1alpha1.InferenceEndpointConfig) { e.Spec.AutoScalingSpec.MaxReplicaCount = ptr.To[int32](7) })
	eventually(t, "HPA max 7", func() error {
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "as-worker"}, &h); err != nil {
			return err
		}
		if h.Spec.MaxReplicas != 7 {
			return fmt.Errorf("max %d", h.Spec.MaxReplicas)
		}
		return nil
	})
	if n := workerReplicas(t, c, ns, "as"); n != 5 {
		t.Fatalf("worker replicas %d after a reconcile, want the autoscaler's 5: the operator fights the autoscaler", n)
	}

	// The endpoint's scale subresource: what kubectl scale and an
	// autoscaler targeting the endpoint read and write.
	setReady(t, c, ns, "as-worker", 5)
	scale := &autoscalingv1.Scale{}
	eventually(t, "scale subresource status", func() error {
		if err := c.SubResource("scale").Get(ctx, iec, scale); err != nil {
			return err
		}
		if scale.Status.Replicas != 5 || !strings.Contains(scale.Status.Selector, "inference.warmpath.io/endpoint=as") ||
			!strings.Contains(scale.Status.Selector, "app.kubernetes.io/component=worker") {
			return fmt.Errorf("scale %+v", scale.Status)
		}
		return nil
	})
	if scale.Spec.Replicas != 2 {
		t.Errorf("scale spec.replicas %d, want spec.replicas 2", scale.Spec.Replicas)
	}

	// KEDA installed: a ScaledObject replaces the HPA.
	if _, err := envtest.InstallCRDs(suite.cfg, envtest.CRDInstallOptions{
		Paths: []string{filepath.Join("testdata", "keda")}, ErrorIfPathMissing: true,
	}); err != nil {
		t.Fatal(err)
	}
	editSpec(t, c, iec, func(e *v1alpha1.InferenceEndpointConfig) { e.Spec.AutoScalingSpec.PollingInterval = ptr.To[int32](15) })
	so := &unstructured.Unstructured{}
	so.SetGroupVersionKind(controller.ScaledObjectGVK)
	// A reconcile for another cause may write the ScaledObject before
	// the edit's: wait for the edit.
	eventually(t, "ScaledObject with pollingInterval 15", func() error {
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "as-worker"}, so); err != nil {
			return err
		}
		if v, _, _ := unstructured.NestedInt64(so.Object, "spec", "pollingInterval"); v != 15 {
			return fmt.Errorf("pollingInterval %d", v)
		}
		return nil
	})
	gone(t, c, ns, "as-worker", &autoscalingv2.HorizontalPodAutoscaler{})
	autoscalingCond(metav1.ConditionTrue, "KEDAScaledObject")
	if ref := metav1.GetControllerOf(so); ref == nil || ref.UID != iec.UID {
		t.Errorf("ScaledObject controller reference %+v, want the endpoint", ref)
	}
	spec := so.Object["spec"].(map[string]any)
	for _, f := range []struct {
		path []string
		want any
	}{
		{[]string{"scaleTargetRef", "name"}, "as-worker"},
		{[]string{"scaleTargetRef", "kind"}, "Deployment"},
		{[]string{"minReplicaCount"}, int64(2)},
		{[]string{"maxReplicaCount"}, int64(7)},
		{[]string{"pollingInterval"}, int64(15)},
		{[]string{"advanced", "horizontalPodAutoscalerConfig", "behavior", "scaleDown", "stabilizationWindowSeconds"}, int64(600)},
	} {
		if v, _, _ := unstructured.NestedFieldNoCopy(spec, f.path...); v != f.want {
			t.Errorf("ScaledObject spec.%s = %v (%T), want %v", strings.Join(f.path, "."), v, v, f.want)
		}
	}
	triggers, _, _ := unstructured.NestedSlice(spec, "triggers")
	var trig []string
	for _, tr := range triggers {
		m := tr.(map[string]any)
		md := m["metadata"].(map[string]any)
		trig = append(trig, fmt.Sprintf("%s %s %s %s | %s", m["type"], m["name"], m["metricType"], md["threshold"], md["query"]))
		if md["serverAddress"] != "http://prometheus.monitoring.svc:9090" {
			t.Errorf("trigger %s serverAddress %v", m["name"], md["serverAddress"])
		}
	}
	wantTrig := []string{
		`prometheus waiting-requests AverageValue 4 | sum(vllm:num_requests_waiting{namespace="` + ns + `",endpoint="as"}) or vector(0)`,
		`prometheus kv-cache-usage Value 0.8 | avg(vllm:kv_cache_usage_perc{namespace="` + ns + `",endpoint="as"}) or vector(0)`,
		`prometheus router-ttft-p90 Value 1.5 | histogram_quantile(0.9, sum by (le) (rate(warmpath_router_ttft_seconds_bucket{namespace="` + ns +
			`",endpoint="as"}[2m]))) > 0 or vector(0)`,
	}
	if strings.Join(trig, "\n") != strings.Join(wantTrig, "\n") {
		t.Errorf("ScaledObject triggers\n got %s\nwant %s", strings.Join(trig, "\n"), strings.Join(wantTrig, "\n"))
	}
	if n := workerReplicas(t, c, ns, "as"); n != 5 {
		t.Errorf("worker replicas %d after the switch to KEDA, want the autoscaler's 5", n)
	}

	// Autoscaling off: the ScaledObject goes and spec.replicas rules,
	// edits by others restored again.
	editSpec(t, c, iec, func(e *v1alpha1.InferenceEndpointConfig) {
		e.Spec.AutoScalingSpec = nil
		e.Spec.Replicas = ptr.To[int32](3)
	})
	gone(t, c, ns, "as-worker", so)
	eventually(t, "worker replicas 3 from spec.replicas", func() error {
		if n := workerReplicas(t, c, ns, "as"); n != 3 {
			return fmt.Errorf("replicas %d", n)
		}
		return nil
	})
	waitStatus(t, c, iec, "AutoscalingReady removed", func(cur *v1alpha1.InferenceEndpointConfig) error {
		if cond := meta.FindStatusCondition(cur.Status.Conditions, v1alpha1.ConditionAutoscalingReady); cond != nil {
			return fmt.Errorf("condition %+v still there", cond)
		}
		return nil
	})
	setWorkerReplicasAsAutoscaler(t, c, ns, "as", 6)
	eventually(t, "worker replicas restored to 3", func() error {
		if n := workerReplicas(t, c, ns, "as"); n != 3 {
			return fmt.Errorf("replicas %d", n)
		}
		return nil
	})

	// kubectl scale on the endpoint now sets the workers.
	eventually(t, "kubectl scale iec --replicas=4", func() error {
		patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":4}}`))
		return c.SubResource("scale").Patch(ctx, iec, patch, client.WithSubResourceBody(&autoscalingv1.Scale{}))
	})
	eventually(t, "worker replicas 4 from the scale subresource", func() error {
		if n := workerReplicas(t, c, ns, "as"); n != 4 {
			return fmt.Errorf("replicas %d", n)
		}
		return nil
	})

	// Autoscaling on again with KEDA present and no Prometheus to query:
	// refused by condition, nothing written, the count left as it is.
	editSpec(t, c, iec, func(e *v1alpha1.InferenceEndpointConfig) {
		e.Spec.AutoScalingSpec = &v1alpha1.AutoScalingSpec{
			MinReplicaCount: ptr.To[int32](1), MaxReplicaCount: ptr.To[int32](8),
			Targets: &v1alpha1.AutoScalingTargets{WaitingRequestsPerWorker: ptr.To[int32](4)},
		}
	})
	autoscalingCond(metav1.ConditionFalse, "PrometheusAddressMissing")
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "as-worker"}, so); !apierrors.IsNotFound(err) {
		t.Errorf("ScaledObject without a Prometheus address: %v, want none", err)
	}
	if n := workerReplicas(t, c, ns, "as"); n != 4 {
		t.Errorf("worker replicas %d after handing over, want 4 kept", n)
	}
}

func TestAutoscalingValidation(t *testing.T) {
	c := cluster(t)
	ns := namespace(t, c)
	cases := []struct {
		name string
		edit func(*v1alpha1.AutoScalingSpec)
		want string // "" accepted
	}{
		{"min over max", func(a *v1alpha1.AutoScalingSpec) {
			a.MinReplicaCount, a.MaxReplicaCount = ptr.To[int32](4), ptr.To[int32](3)
		},
			"autoScalingSpec.minReplicaCount must not exceed maxReplicaCount"},
		{"zero without scaleToZero", func(a *v1alpha1.AutoScalingSpec) { a.MinReplicaCount = ptr.To[int32](0) },
			"autoScalingSpec.minReplicaCount 0 needs scaleToZero: true"},
		{"zero with scaleToZero", func(a *v1alpha1.AutoScalingSpec) { a.MinReplicaCount, a.ScaleToZero = ptr.To[int32](0), true }, ""},
		{"nothing to scale on", func(a *v1alpha1.AutoScalingSpec) { a.Targets = nil },
			"autoScalingSpec needs something to scale on"},
		{"empty targets", func(a *v1alpha1.AutoScalingSpec) { a.Targets = &v1alpha1.AutoScalingTargets{} },
			"targets needs at least one of"},
		{"kv usage over 100", func(a *v1alpha1.AutoScalingSpec) { a.Targets.KVCacheUsagePercent = ptr.To[int32](120) },
			"spec.autoScalingSpec.targets.kvCacheUsagePercent in body should be less than or equal to 100"},
		{"ttft without the router", func(a *v1alpha1.AutoScalingSpec) { a.Targets.RouterTTFTMilliseconds = ptr.To[int32](500) },
			"autoScalingSpec.targets.routerTTFTMilliseconds needs intelligentRoutingSpec.enabled"},
		{"prometheus trigger alone", func(a *v1alpha1.AutoScalingSpec) {
			a.Targets = nil
			a.PrometheusTrigger = &v1alpha1.PrometheusTrigger{Name: "queue", Query: "sum(x)", TargetValue: 10.5}
		}, ""},
		{"trigger target zero", func(a *v1alpha1.AutoScalingSpec) {
			a.PrometheusTrigger = &v1alpha1.PrometheusTrigger{Query: "sum(x)", TargetValue: 0}
		}, "spec.autoScalingSpec.prometheusTrigger.targetValue in body should be greater than 0"},
		{"bad server address", func(a *v1alpha1.AutoScalingSpec) { a.PrometheusServerAddress = "prometheus:9090" },
			"spec.autoScalingSpec.prometheusServerAddress: Invalid value"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			iec := minimal(ns, fmt.Sprintf("v%d", i))
			iec.Spec.AutoScalingSpec = &v1alpha1.AutoScalingSpec{Targets: &v1alpha1.AutoScalingTargets{WaitingRequestsPerWorker: ptr.To[int32](2)}}
			tc.edit(iec.Spec.AutoScalingSpec)
			err := c.Create(context.Background(), iec)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}
