package controller

import (
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	labelsel "k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

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
	// ModelFetchImage is model-fetch's image, the init container that
	// copies an s3 model source into the model volume.
	ModelFetchImage string
	// CacheServerPort is the node-local tiered-storage cache server's
	// host port (lm:// protocol).
	CacheServerPort int
	// CacheServerDaemonSet, "namespace/name", is the tiered-storage cache
	// server's DaemonSet; when set, CacheReady for tieredstorage endpoints
	// follows its readiness. Empty: the wiring alone is reported.
	CacheServerDaemonSet string
	// CacheServerDNS, when set, is a name resolving to every tiered-storage
	// cache server (the chart's headless peers Service): the routers of
	// tieredstorage endpoints follow the servers' own KV events there
	// (their snapshot on CacheServerSnapshotPort, their stream on
	// CacheServerEventsPort), so kvaware knows exactly what the L2 holds.
	CacheServerDNS          string
	CacheServerSnapshotPort int
	CacheServerEventsPort   int
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

// AddToScheme registers every kind the reconciler writes: Kubernetes'
// own, InferenceEndpointConfig and the Gateway API's v1 kinds (HTTPRoute),
// which server-side apply and deletion look up by Go type. Registering a
// type needs no CRD: where the Gateway API is absent the operator skips
// HTTPRoutes (kindInstalled).
func AddToScheme(s *runtime.Scheme) error {
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, v1alpha1.AddToScheme, gatewayv1.Install} {
		if err := add(s); err != nil {
			return fmt.Errorf("registering the operator's kinds: %w", err)
		}
	}
	return nil
}

// CacheOptions limit the manager's informers for the child kinds to the
// objects the operator labelled, so its memory follows the number of
// endpoints, not the cluster's ConfigMaps, Services and Deployments; and
// for pods to the operator's worker pods, the only ones it reads.
func CacheOptions() cache.Options {
	managed := labelsel.SelectorFromSet(labelsel.Set{"app.kubernetes.io/managed-by": FieldOwner})
	by := map[client.Object]cache.ByObject{}
	for _, obj := range []client.Object{
		&appsv1.Deployment{}, &corev1.Service{}, &corev1.ConfigMap{}, &corev1.ServiceAccount{},
		&rbacv1.Role{}, &rbacv1.RoleBinding{}, &policyv1.PodDisruptionBudget{}, &networkingv1.Ingress{},
		&autoscalingv2.HorizontalPodAutoscaler{},
	} {
		by[obj] = cache.ByObject{Label: managed}
	}
	by[&corev1.Pod{}] = cache.ByObject{Label: labelsel.SelectorFromSet(labelsel.Set{
		"app.kubernetes.io/managed-by": FieldOwner, "app.kubernetes.io/component": componentWorker,
	})}
	return cache.Options{ByObject: by}
}
