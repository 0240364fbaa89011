package controller

import (
	"maps"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/warmpath/warmpath/services/operator/api/v1alpha1"
)

// everyKnob sets every PodScheduling field, with a topology spread
// constraint that names its own selector and one that does not.
func everyKnob() *v1alpha1.PodScheduling {
	return &v1alpha1.PodScheduling{
		NodeSelector: map[string]string{"pool": "gpu"},
		Tolerations:  []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
		Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
				{Key: "topology.kubernetes.io/zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a", "b"}},
			}}},
		}}},
		PriorityClassName: "inference-high",
		RuntimeClassName:  ptr.To("nvidia"),
		ImagePullSecrets:  []corev1.LocalObjectReference{{Name: "regcred"}},
		TopologySpreadConstraints: []corev1.TopologySpreadConstraint{
			{MaxSkew: 1, TopologyKey: "topology.kubernetes.io/zone", WhenUnsatisfiable: corev1.ScheduleAnyway},
			{MaxSkew: 1, TopologyKey: "kubernetes.io/hostname", WhenUnsatisfiable: corev1.DoNotSchedule,
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"mine": "yes"}}},
		},
		Resources: &corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("8")}},
	}
}

// TestWorkerPodScheduling: worker.scheduling reaches the worker pod,
// spec.instanceType joins its node selector, and simulated workers drop
// what names GPU hardware (instanceType, runtimeClassName, resources).
func TestWorkerPodScheduling(t *testing.T) {
	o := Options{SimulatorImage: "sim:test"}
	iecWith := func(edit func(*v1alpha1.InferenceEndpointConfig)) *v1alpha1.InferenceEndpointConfig {
		iec := routed()
		edit(iec)
		return iec
	}
	gpu := corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}}
	tests := []struct {
		name          string
		iec           *v1alpha1.InferenceEndpointConfig
		nodeSelector  map[string]string
		runtimeClass  *string
		gpus          string // the container's nvidia.com/gpu limit, "" for none
		everyKnobRest bool   // tolerations, affinity, priority, pull secrets, spread as in everyKnob
	}{
		{name: "nothing set", iec: routed()},
		{name: "worker.resources", iec: iecWith(func(e *v1alpha1.InferenceEndpointConfig) { e.Spec.Worker.Resources = gpu }), gpus: "1"},
		{name: "instanceType alone",
			iec:          iecWith(func(e *v1alpha1.InferenceEndpointConfig) { e.Spec.InstanceType = "ml.g5.8xlarge" }),
			nodeSelector: map[string]string{v1alpha1.InstanceTypeLabel: "ml.g5.8xlarge"}},
		{name: "instanceType merged with every knob",
			iec: iecWith(func(e *v1alpha1.InferenceEndpointConfig) {
				e.Spec.InstanceType = "ml.g5.8xlarge"
				e.Spec.Worker.Scheduling = everyKnob()
			}),
			nodeSelector: map[string]string{"pool": "gpu", v1alpha1.InstanceTypeLabel: "ml.g5.8xlarge"},
			runtimeClass: ptr.To("nvidia"), gpus: "8", everyKnobRest: true},
		{name: "instanceType repeated in nodeSelector",
			iec: iecWith(func(e *v1alpha1.InferenceEndpointConfig) {
				e.Spec.InstanceType = "ml.g5.8xlarge"
				e.Spec.Worker.Scheduling = &v1alpha1.PodScheduling{NodeSelector: map[string]string{v1alpha1.InstanceTypeLabel: "ml.g5.8xlarge"}}
			}),
			nodeSelector: map[string]string{v1alpha1.InstanceTypeLabel: "ml.g5.8xlarge"}},
		{name: "simulated drops GPU placement",
			iec: iecWith(func(e *v1alpha1.InferenceEndpointConfig) {
				e.Spec.Simulate = true
				e.Spec.InstanceType = "ml.g5.8xlarge"
				e.Spec.Worker.Scheduling = everyKnob()
			}),
			nodeSelector: map[string]string{"pool": "gpu"}, everyKnobRest: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := tt.iec.DeepCopy()
			d := workerDeployment(tt.iec, o)
			pod := d.Spec.Template.Spec
			if !apiequality.Semantic.DeepEqual(before, tt.iec) {
				t.Fatal("building the Deployment changed the endpoint's spec")
			}
			if !maps.Equal(pod.NodeSelector, tt.nodeSelector) {
				t.Errorf("nodeSelector = %v, want %v", pod.NodeSelector, tt.nodeSelector)
			}
			if got := ptr.Deref(pod.RuntimeClassName, ""); got != ptr.Deref(tt.runtimeClass, "") {
				t.Errorf("runtimeClassName = %q, want %q", got, ptr.Deref(tt.runtimeClass, ""))
			}
			lim := pod.Containers[0].Resources.Limits["nvidia.com/gpu"]
			if got := lim.String(); (tt.gpus == "" && !lim.IsZero()) || (tt.gpus != "" && got != tt.gpus) {
				t.Errorf("nvidia.com/gpu limit = %s, want %q", got, tt.gpus)
			}
			checkRest(t, pod, tt.everyKnobRest, d.Spec.Selector.MatchLabels)
		})
	}
}

// checkRest checks the knobs other than nodeSelector, runtime class and
// resources: as everyKnob sets them when want, else unset. A spread
// constraint without its own selector gets the component's.
func checkRest(t *testing.T, pod corev1.PodSpec, want bool, own map[string]string) {
	t.Helper()
	if !want {
		if pod.Tolerations != nil || pod.Affinity != nil || pod.PriorityClassName != "" || pod.ImagePullSecrets != nil || pod.TopologySpreadConstraints != nil {
			t.Errorf("scheduling fields set with none asked for: %+v", pod)
		}
		return
	}
	k := everyKnob()
	if !apiequality.Semantic.DeepEqual(pod.Tolerations, k.Tolerations) {
		t.Errorf("tolerations = %+v", pod.Tolerations)
	}
	if !apiequality.Semantic.DeepEqual(pod.Affinity, k.Affinity) {
		t.Errorf("affinity = %+v", pod.Affinity)
	}
	if pod.PriorityClassName != k.PriorityClassName {
		t.Errorf("priorityClassName = %q", pod.PriorityClassName)
	}
	if !apiequality.Semantic.DeepEqual(pod.ImagePullSecrets, k.ImagePullSecrets) {
		t.Errorf("imagePullSecrets = %+v", pod.ImagePullSecrets)
	}
	tsc := pod.TopologySpreadConstraints
	if len(tsc) != 2 {
		t.Fatalf("topologySpreadConstraints = %+v, want 2", tsc)
	}
	if tsc[0].LabelSelector == nil || !maps.Equal(tsc[0].LabelSelector.MatchLabels, own) {
		t.Errorf("a constraint without a selector got %+v, want the pods' own labels %v", tsc[0].LabelSelector, own)
	}
	if !maps.Equal(tsc[1].LabelSelector.MatchLabels, map[string]string{"mine": "yes"}) {
		t.Errorf("a constraint's own selector was replaced: %+v", tsc[1].LabelSelector)
	}
}

// TestRouterPodScheduling: intelligentRoutingSpec.routerScheduling reaches
// the router pod; its resources replace the default as routerResources
// does; instanceType (the workers' GPU nodes) does not apply to it.
func TestRouterPodScheduling(t *testing.T) {
	withKnobs := routed()
	withKnobs.Spec.InstanceType = "ml.g5.8xlarge"
	withKnobs.Spec.IntelligentRoutingSpec.RouterScheduling = everyKnob()
	withKnobs.Spec.IntelligentRoutingSpec.RouterScheduling.Resources = &corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}}
	oldField := routed()
	oldField.Spec.IntelligentRoutingSpec.RouterResources = &corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3")}}
	tests := []struct {
		name         string
		iec          *v1alpha1.InferenceEndpointConfig
		nodeSelector map[string]string
		cpu          string
		knobs        bool
	}{
		{"defaults", routed(), nil, "100m", false},
		{"routerResources", oldField, nil, "3", false},
		{"every knob", withKnobs, map[string]string{"pool": "gpu"}, "2", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := routerDeployment(tt.iec, Options{RouterImage: "router:test"})
			pod := d.Spec.Template.Spec
			if !maps.Equal(pod.NodeSelector, tt.nodeSelector) {
				t.Errorf("nodeSelector = %v, want %v", pod.NodeSelector, tt.nodeSelector)
			}
			if got := pod.Containers[0].Resources.Requests.Cpu().String(); got != tt.cpu {
				t.Errorf("CPU request = %s, want %s", got, tt.cpu)
			}
			if tt.knobs && ptr.Deref(pod.RuntimeClassName, "") != "nvidia" {
				t.Errorf("runtimeClassName = %v", pod.RuntimeClassName)
			}
			checkRest(t, pod, tt.knobs, d.Spec.Selector.MatchLabels)
		})
	}
}
