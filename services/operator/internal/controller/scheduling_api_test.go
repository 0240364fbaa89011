package controller_test

import (
	"context"
	"fmt"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/warmpath/warmpath/services/operator/api/v1alpha1"
)

// TestSchedulingReachesPods: instanceType, worker.scheduling and
// intelligentRoutingSpec.routerScheduling pass the CRD and the API
// server's Deployment validation and land in the pod templates; removing
// them from the spec removes them from the pods (the operator owned them
// under server-side apply), while fields other managers set stay, as
// TestDriftIsRestored checks.
func TestSchedulingReachesPods(t *testing.T) {
	c := cluster(t)
	ns := namespace(t, c)
	knobs := func(cpu string) *v1alpha1.PodScheduling {
		return &v1alpha1.PodScheduling{
			NodeSelector:      map[string]string{"pool": "inference"},
			Tolerations:       []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
			Affinity:          &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{Weight: 10, PodAffinityTerm: corev1.PodAffinityTerm{TopologyKey: "kubernetes.io/hostname", LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"a": "b"}}}}}}},
			PriorityClassName: "inference-high",
			RuntimeClassName:  ptr.To("nvidia"),
			ImagePullSecrets:  []corev1.LocalObjectReference{{Name: "regcred"}},
			TopologySpreadConstraints: []corev1.TopologySpreadConstraint{
				{MaxSkew: 1, TopologyKey: "topology.kubernetes.io/zone", WhenUnsatisfiable: corev1.ScheduleAnyway},
			},
			Resources: &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}},
		}
	}
	iec := minimal(ns, "sched")
	iec.Spec.InstanceType = "ml.g5.8xlarge"
	iec.Spec.Worker.Scheduling = knobs("6")
	iec.Spec.Worker.Scheduling.NodeSelector[v1alpha1.InstanceTypeLabel] = "ml.g5.8xlarge" // the same value is admitted
	iec.Spec.IntelligentRoutingSpec = v1alpha1.IntelligentRoutingSpec{Enabled: ptr.To(true), RouterScheduling: knobs("2")}
	if err := c.Create(context.Background(), iec); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, deployment, cpu string
		nodeSelector          map[string]string
	}{
		{"workers", "sched-worker", "6", map[string]string{"pool": "inference", v1alpha1.InstanceTypeLabel: "ml.g5.8xlarge"}},
		{"router", "sched-router", "2", map[string]string{"pool": "inference"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var d appsv1.Deployment
			get(t, c, ns, tt.deployment, &d)
			pod := d.Spec.Template.Spec
			if fmt.Sprint(pod.NodeSelector) != fmt.Sprint(tt.nodeSelector) {
				t.Errorf("nodeSelector %v, want %v", pod.NodeSelector, tt.nodeSelector)
			}
			if len(pod.Tolerations) != 1 || pod.Affinity == nil || pod.Affinity.PodAntiAffinity == nil || pod.PriorityClassName != "inference-high" ||
				ptr.Deref(pod.RuntimeClassName, "") != "nvidia" || len(pod.ImagePullSecrets) != 1 || pod.ImagePullSecrets[0].Name != "regcred" {
				t.Errorf("pod scheduling fields not applied: tolerations %v, affinity %+v, priority %q, runtime class %v, pull secrets %v",
					pod.Tolerations, pod.Affinity, pod.PriorityClassName, pod.RuntimeClassName, pod.ImagePullSecrets)
			}
			if tsc := pod.TopologySpreadConstraints; len(tsc) != 1 || tsc[0].LabelSelector == nil ||
				fmt.Sprint(tsc[0].LabelSelector.MatchLabels) != fmt.Sprint(d.Spec.Selector.MatchLabels) {
				t.Errorf("topologySpreadConstraints %+v, want one selecting the Deployment's pods %v", tsc, d.Spec.Selector.MatchLabels)
			}
			if got := pod.Containers[0].Resources.Requests.Cpu().String(); got != tt.cpu {
				t.Errorf("CPU request %s, want %s", got, tt.cpu)
			}
		})
	}

	eventually(t, "clearing the scheduling fields", func() error {
		var cur v1alpha1.InferenceEndpointConfig
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(iec), &cur); err != nil {
			return err
		}
		cur.Spec.InstanceType, cur.Spec.Worker.Scheduling, cur.Spec.IntelligentRoutingSpec.RouterScheduling = "", nil, nil
		return c.Update(context.Background(), &cur)
	})
	for _, name := range []string{"sched-worker", "sched-router"} {
		eventually(t, name+" without scheduling fields", func() error {
			var d appsv1.Deployment
			if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &d); err != nil {
				return err
			}
			if p := d.Spec.Template.Spec; p.NodeSelector != nil || p.Tolerations != nil || p.Affinity != nil || p.PriorityClassName != "" ||
				p.RuntimeClassName != nil || p.ImagePullSecrets != nil || p.TopologySpreadConstraints != nil {
				return fmt.Errorf("still set: %+v", p)
			}
			return nil
		})
	}
}
