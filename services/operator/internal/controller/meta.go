package controller

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/warmpath/warmpath/services/operator/api/v1alpha1"
)

// FieldOwner is the operator's server-side apply field manager.
const FieldOwner = "warmpath-operator"

// EndpointLabel names the InferenceEndpointConfig a child belongs to.
const EndpointLabel = "inference.warmpath.io/endpoint"

const (
	componentWorker = "worker"
	componentRouter = "router"
	componentFront  = "endpoint"
)

// Options are the operator-wide settings (flags; the chart sets them).
type Options struct {
	// RouterImage is the warmpath router image.
	RouterImage string
	// SimulatorImage is the vllm-sim image used for simulated endpoints.
	SimulatorImage string
	// CacheServerPort is the node-local tiered-storage cache server's
	// host port (lm:// protocol).
	CacheServerPort int
}

// selectorLabels are the immutable labels a Deployment selects its pods by.
func selectorLabels(iec *v1alpha1.InferenceEndpointConfig, component string) map[string]string {
	return map[string]string{EndpointLabel: iec.Name, "app.kubernetes.io/component": component}
}

func labels(iec *v1alpha1.InferenceEndpointConfig, component string) map[string]string {
	l := selectorLabels(iec, component)
	l["app.kubernetes.io/name"] = "warmpath"
	l["app.kubernetes.io/instance"] = iec.Name
	l["app.kubernetes.io/managed-by"] = FieldOwner
	return l
}

func objectMeta(iec *v1alpha1.InferenceEndpointConfig, name, component string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: iec.Namespace, Labels: labels(iec, component)}
}
