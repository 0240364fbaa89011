package controller

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/warmpath/warmpath/services/operator/api/v1alpha1"
)

const (
	// scratchUID runs warmpath's own images (router, vllm-sim): they are
	// FROM scratch and need no user of their own, as in the chart.
	scratchUID = 65532
	// workerUID runs vLLM: a uid the image need not know. Its home would
	// then be "/", hence workerHome.
	workerUID = 1000
	// workerHome is the worker's HOME, an emptyDir: Hugging Face, Triton
	// and torch.compile write their caches under it.
	workerHome = "/home/vllm"
)

// podSecurity is the restrictive pod default: a non-root uid (named, so
// the kubelet need not trust the image's USER), RuntimeDefault seccomp.
func podSecurity(uid int64) *corev1.PodSecurityContext {
	return &corev1.PodSecurityContext{
		RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To(uid), RunAsGroup: ptr.To(uid), FSGroup: ptr.To(uid),
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		// A model volume of many gigabytes is chowned for fsGroup only
		// when its root is not the group's already, not on every start.
		FSGroupChangePolicy: ptr.To(corev1.FSGroupChangeOnRootMismatch),
	}
}

// containerSecurity drops every capability and privilege escalation; the
// root filesystem is read-only where the image allows it.
func containerSecurity(readOnlyRoot bool) *corev1.SecurityContext {
	return &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		ReadOnlyRootFilesystem:   ptr.To(readOnlyRoot),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
}

// workerSecurity is the workers' pod and container security context: the
// spec's, where given, replaces the default whole. The simulator is
// warmpath's own image and runs as the router does. vLLM's images write
// outside any one directory (pip caches, compiled kernels, /tmp), so
// their root filesystem stays writable.
func workerSecurity(iec *v1alpha1.InferenceEndpointConfig) (*corev1.PodSecurityContext, *corev1.SecurityContext) {
	if simulated(iec) {
		return podSecurity(scratchUID), containerSecurity(true)
	}
	pod, ctr := podSecurity(workerUID), containerSecurity(false)
	if w := iec.Spec.Worker; w.PodSecurityContext != nil {
		pod = w.PodSecurityContext.DeepCopy()
	}
	if w := iec.Spec.Worker; w.SecurityContext != nil {
		ctr = w.SecurityContext.DeepCopy()
	}
	return pod, ctr
}

// routerResources are the router's resources: the spec's (routerResources
// or routerScheduling.resources; the CRD admits at most one), or requests
// that let the scheduler account for it (its memory follows the KV index,
// bounded by its own configuration, so no limit is guessed here).
func routerResources(iec *v1alpha1.InferenceEndpointConfig) corev1.ResourceRequirements {
	rs := iec.Spec.IntelligentRoutingSpec
	if rs.RouterScheduling != nil && rs.RouterScheduling.Resources != nil {
		return *rs.RouterScheduling.Resources.DeepCopy()
	}
	if r := rs.RouterResources; r != nil {
		return *r.DeepCopy()
	}
	return corev1.ResourceRequirements{Requests: corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")}}
}
