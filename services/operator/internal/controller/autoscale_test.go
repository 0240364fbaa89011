package controller

import (
	"fmt"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/warmpath/warmpath/services/operator/api/v1alpha1"
)

func TestAutoscaleBounds(t *testing.T) {
	cases := []struct {
		name     string
		min, max int32
		keda     bool
		lo, hi   int32
	}{
		{"hpa keeps its bounds", 2, 6, false, 2, 6},
		{"keda scales to zero", 0, 4, true, 0, 4},
		// HPAScaleToZero is an alpha feature gate: an HPA keeps one.
		{"hpa cannot scale to zero", 0, 4, false, 1, 4},
		{"hpa with max 1 and min 0", 0, 1, false, 1, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			as := &v1alpha1.AutoScalingSpec{MinReplicaCount: ptr.To(tc.min), MaxReplicaCount: ptr.To(tc.max), ScaleToZero: tc.min == 0}
			if lo, hi := autoscaleBounds(as, tc.keda); lo != tc.lo || hi != tc.hi {
				t.Fatalf("bounds %d..%d, want %d..%d", lo, hi, tc.lo, tc.hi)
			}
		})
	}
}

func TestReplicasOwners(t *testing.T) {
	entry := func(manager, fields string) metav1.ManagedFieldsEntry {
		return metav1.ManagedFieldsEntry{Manager: manager, FieldsV1: metav1.NewFieldsV1(fields)}
	}
	cases := []struct {
		name   string
		fields []metav1.ManagedFieldsEntry
		want   []string
	}{
		{"none", nil, nil},
		{"operator", []metav1.ManagedFieldsEntry{
			entry(FieldOwner, `{"f:metadata":{"f:labels":{}},"f:spec":{"f:replicas":{},"f:template":{}}}`),
			entry("kube-controller-manager", `{"f:status":{"f:replicas":{}}}`),
		}, []string{FieldOwner}},
		{"autoscaler through the scale subresource, operator without the field", []metav1.ManagedFieldsEntry{
			entry(FieldOwner, `{"f:spec":{"f:template":{}}}`),
			entry("horizontal-pod-autoscaler", `{"f:spec":{"f:replicas":{}}}`),
		}, []string{"horizontal-pod-autoscaler"}},
		{"shared", []metav1.ManagedFieldsEntry{
			entry(FieldOwner, `{"f:spec":{"f:replicas":{}}}`),
			entry(replicasHandoverOwner, `{"f:spec":{"f:replicas":{}}}`),
		}, []string{FieldOwner, replicasHandoverOwner}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := replicasOwners(&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{ManagedFields: tc.fields}})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("owners %q, want %q", got, tc.want)
			}
		})
	}
	if _, err := replicasOwners(&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{ManagedFields: []metav1.ManagedFieldsEntry{entry("x", "{")}}}); err == nil {
		t.Fatal("malformed managed fields accepted")
	}
}

// TestPrometheusTrigger: the managed offering's trigger on both paths,
// its metricType mapped to the HPA's target types.
func TestPrometheusTrigger(t *testing.T) {
	cases := []struct {
		name       string
		trigger    v1alpha1.PrometheusTrigger
		address    string
		hpa, keda  string
		addressGap string
	}{
		{"average, named, own server", v1alpha1.PrometheusTrigger{Name: "queue", Query: "sum(q)", TargetValue: 10.5, MetricType: v1alpha1.MetricTypeAverage,
			ServerAddress: "http://amp:9090"}, "",
			"External queue AverageValue 10500m", "queue AverageValue 10.5 http://amp:9090", ""},
		{"value, unnamed, endpoint's server", v1alpha1.PrometheusTrigger{Query: "max(q)", TargetValue: 2, MetricType: v1alpha1.MetricTypeValue},
			"http://prom:9090", "External prometheus_trigger Value 2", "prometheus_trigger Value 2 http://prom:9090", ""},
		{"no server at all", v1alpha1.PrometheusTrigger{Query: "max(q)", TargetValue: 2, MetricType: v1alpha1.MetricTypeValue},
			"", "External prometheus_trigger Value 2", "prometheus_trigger Value 2 ", "prometheus_trigger"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			iec := routed()
			iec.Spec.AutoScalingSpec = &v1alpha1.AutoScalingSpec{PrometheusTrigger: &tc.trigger, PrometheusServerAddress: tc.address}
			ms := hpa(iec).Spec.Metrics
			if len(ms) != 1 || ms[0].Type != autoscalingv2.ExternalMetricSourceType {
				t.Fatalf("HPA metrics %+v, want one External", ms)
			}
			tg := ms[0].External.Target
			v := tg.Value
			if tg.Type == autoscalingv2.AverageValueMetricType {
				v = tg.AverageValue
			}
			if got := fmt.Sprintf("External %s %s %s", ms[0].External.Metric.Name, tg.Type, v); got != tc.hpa {
				t.Errorf("HPA metric %q, want %q", got, tc.hpa)
			}
			trig := scaledObject(iec).Object["spec"].(map[string]any)["triggers"].([]any)[0].(map[string]any)
			md := trig["metadata"].(map[string]any)
			if got := fmt.Sprintf("%s %s %s %s", trig["name"], trig["metricType"], md["threshold"], md["serverAddress"]); got != tc.keda {
				t.Errorf("KEDA trigger %q, want %q", got, tc.keda)
			}
			if md["query"] != tc.trigger.Query {
				t.Errorf("KEDA query %v, want the trigger's", md["query"])
			}
			if got := kedaAddressMissing(iec); got != tc.addressGap {
				t.Errorf("trigger without an address %q, want %q", got, tc.addressGap)
			}
		})
	}
}

// TestAutoscaledDeploymentLeavesReplicas: with an autoscaler the
// operator's apply names no replicas, so it never takes them back.
func TestAutoscaledDeploymentLeavesReplicas(t *testing.T) {
	iec := routed()
	iec.Spec.Replicas = ptr.To[int32](3)
	if r := workerDeployment(iec, Options{}).Spec.Replicas; ptr.Deref(r, -1) != 3 {
		t.Fatalf("replicas %v without autoscaling, want 3", r)
	}
	iec.Spec.AutoScalingSpec = &v1alpha1.AutoScalingSpec{Targets: &v1alpha1.AutoScalingTargets{WaitingRequestsPerWorker: ptr.To[int32](4)}}
	if r := workerDeployment(iec, Options{}).Spec.Replicas; r != nil {
		t.Fatalf("replicas %d with autoscaling, want none", *r)
	}
}
