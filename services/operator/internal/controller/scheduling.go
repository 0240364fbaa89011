package controller

import (
	"maps"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/warmpath/warmpath/services/operator/api/v1alpha1"
)

// schedulePod copies s onto pod: where the pods may run (node selector,
// tolerations, affinity, topology spread), their priority and runtime
// class, and the pull secrets. Resources are the container's and are set
// by the caller. A topology spread constraint without a labelSelector is
// given own, the component's selector labels: Kubernetes counts only the
// pods a constraint's selector matches, so without one it would spread
// nothing. A nil s leaves pod as it is.
func schedulePod(pod *corev1.PodSpec, s *v1alpha1.PodScheduling, own map[string]string) {
	if s == nil {
		return
	}
	pod.NodeSelector = maps.Clone(s.NodeSelector)
	for _, t := range s.Tolerations {
		pod.Tolerations = append(pod.Tolerations, *t.DeepCopy())
	}
	if s.Affinity != nil {
		pod.Affinity = s.Affinity.DeepCopy()
	}
	pod.PriorityClassName = s.PriorityClassName
	if s.RuntimeClassName != nil {
		pod.RuntimeClassName = ptr.To(*s.RuntimeClassName)
	}
	pod.ImagePullSecrets = append(pod.ImagePullSecrets, s.ImagePullSecrets...)
	for _, c := range s.TopologySpreadConstraints {
		c := *c.DeepCopy()
		if c.LabelSelector == nil {
			c.LabelSelector = &metav1.LabelSelector{MatchLabels: maps.Clone(own)}
		}
		pod.TopologySpreadConstraints = append(pod.TopologySpreadConstraints, c)
	}
}

// workerScheduling is the workers' PodScheduling: worker.scheduling with
// spec.instanceType added to its node selector as
// node.kubernetes.io/instance-type (the CRD refuses a different value for
// that label in the node selector, so nothing is overridden here).
// Simulated workers drop instanceType and runtimeClassName, which name
// GPU hardware and its container runtime: simulate exists to run a GPU
// manifest unchanged on a CPU-only cluster, which has neither. Their
// resources are fixed elsewhere for the same reason. Nil when there is
// nothing to apply.
func workerScheduling(iec *v1alpha1.InferenceEndpointConfig) *v1alpha1.PodScheduling {
	s := iec.Spec.Worker.Scheduling.DeepCopy()
	if simulated(iec) {
		if s != nil {
			s.RuntimeClassName = nil
		}
		return s
	}
	if it := iec.Spec.InstanceType; it != "" {
		if s == nil {
			s = &v1alpha1.PodScheduling{}
		}
		if s.NodeSelector == nil {
			s.NodeSelector = map[string]string{}
		}
		s.NodeSelector[v1alpha1.InstanceTypeLabel] = it
	}
	return s
}

// workerResources are the vLLM container's resources: worker.resources
// or worker.scheduling.resources (the CRD admits at most one of them).
func workerResources(iec *v1alpha1.InferenceEndpointConfig) corev1.ResourceRequirements {
	if s := iec.Spec.Worker.Scheduling; s != nil && s.Resources != nil {
		return *s.Resources.DeepCopy()
	}
	return *iec.Spec.Worker.Resources.DeepCopy()
}
