package controller

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/warmpath/warmpath/services/operator/api/v1alpha1"
)

// TestChildNamesAreDNSLabels: for the longest name the CRD admits, every
// name the operator derives is a valid DNS label (Services need one), so a
// bad name is refused when the resource is created, not when a child is
// applied; and the bound is tight, so no valid name is refused.
func TestChildNamesAreDNSLabels(t *testing.T) {
	iec := &v1alpha1.InferenceEndpointConfig{}
	iec.Name = "a" + strings.Repeat("b", v1alpha1.MaxNameLength-1)
	names := map[string]string{
		"front Service":     iec.Name,
		"router":            routerName(iec),
		"workers":           workerName(iec),
		"workers' Service":  WorkerServiceName(iec),
		"LMCache ConfigMap": lmcacheConfigMapName(iec),
	}
	var longest int
	for what, n := range names {
		if errs := validation.IsDNS1035Label(n); len(errs) > 0 {
			t.Errorf("%s name %q: %v", what, n, errs)
		}
		longest = max(longest, len(n))
	}
	if longest != validation.DNS1035LabelMaxLength {
		t.Errorf("longest child name is %d characters for a %d-character endpoint: MaxNameLength could be %d",
			longest, v1alpha1.MaxNameLength, v1alpha1.MaxNameLength+validation.DNS1035LabelMaxLength-longest)
	}
}

func routed() *v1alpha1.InferenceEndpointConfig {
	iec := &v1alpha1.InferenceEndpointConfig{}
	iec.Name, iec.Namespace = "e", "ns"
	iec.Spec.ModelName = "m"
	iec.Spec.Worker.Image = "vllm:test"
	iec.Spec.IntelligentRoutingSpec.Enabled = ptr.To(true)
	return iec
}

// TestPodsAreLockedDown: the router and the workers run non-root, without
// privilege escalation or capabilities, under RuntimeDefault seccomp; the
// router (and the simulator, both FROM scratch images) with a read-only
// root filesystem; the router with resource requests. A worker image that
// needs otherwise sets worker.podSecurityContext / worker.securityContext,
// which replace the defaults whole.
func TestPodsAreLockedDown(t *testing.T) {
	override := routed()
	override.Spec.Worker.PodSecurityContext = &corev1.PodSecurityContext{RunAsUser: ptr.To(int64(0)), RunAsNonRoot: ptr.To(false)}
	override.Spec.Worker.SecurityContext = &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"IPC_LOCK"}}}
	sim := routed()
	sim.Spec.Simulate = true
	o := Options{RouterImage: "router:test", SimulatorImage: "sim:test"}
	tests := []struct {
		name       string
		pod        corev1.PodSpec
		readOnly   bool
		overridden bool
		requests   bool
	}{
		{"router", routerDeployment(routed(), o).Spec.Template.Spec, true, false, true},
		{"worker", workerDeployment(routed(), o).Spec.Template.Spec, false, false, false},
		{"simulated worker", workerDeployment(sim, o).Spec.Template.Spec, true, false, true},
		{"worker with overrides", workerDeployment(override, o).Spec.Template.Spec, false, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ps, c := tt.pod.SecurityContext, tt.pod.Containers[0]
			sc := c.SecurityContext
			if tt.overridden {
				if ps == nil || ps.RunAsUser == nil || *ps.RunAsUser != 0 || sc == nil || len(sc.Capabilities.Add) != 1 {
					t.Fatalf("overrides not applied: pod %+v, container %+v", ps, sc)
				}
				return
			}
			if ps == nil || !ptr.Deref(ps.RunAsNonRoot, false) || ps.RunAsUser == nil || *ps.RunAsUser == 0 ||
				ps.SeccompProfile == nil || ps.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
				t.Errorf("pod security context %+v: want non-root with a uid and RuntimeDefault seccomp", ps)
			}
			if sc == nil || ptr.Deref(sc.AllowPrivilegeEscalation, true) || sc.Capabilities == nil ||
				len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
				t.Fatalf("container security context %+v: want no privilege escalation, all capabilities dropped", sc)
			}
			if ptr.Deref(sc.ReadOnlyRootFilesystem, false) != tt.readOnly {
				t.Errorf("readOnlyRootFilesystem = %v, want %v", ptr.Deref(sc.ReadOnlyRootFilesystem, false), tt.readOnly)
			}
			if tt.requests && (c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero()) {
				t.Errorf("no CPU and memory requests: %v", c.Resources.Requests)
			}
		})
	}
}

// TestWorkerHomeIsWritable: a worker runs as a uid the image may not know,
// whose home would be "/", so HOME points at an emptyDir (caches of
// Hugging Face, Triton, torch.compile), unless the user set HOME.
func TestWorkerHomeIsWritable(t *testing.T) {
	own := routed()
	own.Spec.Worker.EnvironmentVariables = []corev1.EnvVar{{Name: "HOME", Value: "/data"}}
	tests := []struct {
		name string
		iec  *v1alpha1.InferenceEndpointConfig
		want string
	}{
		{"default", routed(), workerHome},
		{"user's HOME", own, "/data"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := workerDeployment(tt.iec, Options{}).Spec.Template.Spec
			var homes []string
			for _, e := range pod.Containers[0].Env {
				if e.Name == "HOME" {
					homes = append(homes, e.Value)
				}
			}
			if len(homes) != 1 || homes[0] != tt.want {
				t.Fatalf("HOME = %v, want [%s]", homes, tt.want)
			}
			var mounted bool
			for _, m := range pod.Containers[0].VolumeMounts {
				mounted = mounted || m.MountPath == workerHome
			}
			if !mounted {
				t.Errorf("no volume at %s", workerHome)
			}
		})
	}
}
