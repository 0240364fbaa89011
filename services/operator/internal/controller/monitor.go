package controller

import (
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	v1alpha1 "github.com/warmpath/warmpath/services/operator/api/v1alpha1"
)

// ServiceMonitorGVK is the Prometheus Operator's ServiceMonitor. The
// operator does not depend on its Go types: it checks at run time whether
// the CRD is installed and writes unstructured objects.
var ServiceMonitorGVK = schema.GroupVersionKind{Group: "monitoring.coreos.com", Version: "v1", Kind: "ServiceMonitor"}

func serviceMonitor(iec *v1alpha1.InferenceEndpointConfig, name, component, port, path string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(ServiceMonitorGVK)
	u.SetName(name)
	u.SetNamespace(iec.Namespace)
	u.SetLabels(labels(iec, component))
	selector := map[string]any{}
	for k, v := range selectorLabels(iec, component) {
		selector[k] = v
	}
	interval := int32Or(iec.Spec.Metrics.MetricsScrapeIntervalSeconds, 15)
	u.Object["spec"] = map[string]any{
		"selector": map[string]any{"matchLabels": selector},
		"endpoints": []any{map[string]any{
			"port": port, "path": path, "interval": fmt.Sprintf("%ds", interval),
			// The Prometheus Operator sets a target's endpoint label to the
			// port's name; the dashboards select by endpoint meaning this
			// InferenceEndpointConfig, which the Service's label names.
			"relabelings": []any{map[string]any{
				"sourceLabels": []any{"__meta_kubernetes_service_label_" + promLabelName(EndpointLabel)},
				"targetLabel":  "endpoint",
				"action":       "replace",
			}},
		}},
	}
	return u
}

// workerServiceMonitor scrapes the workers through their headless Service.
func workerServiceMonitor(iec *v1alpha1.InferenceEndpointConfig) *unstructured.Unstructured {
	port, portName := workerPort(iec)
	if mp := iec.Spec.Metrics.ModelMetrics.Port; mp != 0 && mp != port {
		portName = "metrics"
	}
	path := iec.Spec.Metrics.ModelMetrics.Path
	if path == "" {
		path = "/metrics"
	}
	return serviceMonitor(iec, workerName(iec), componentWorker, portName, path)
}

// routerServiceMonitor scrapes the routers through the endpoint Service.
func routerServiceMonitor(iec *v1alpha1.InferenceEndpointConfig) *unstructured.Unstructured {
	if !routerTLS(iec) {
		return serviceMonitor(iec, routerName(iec), componentFront, "http", "/metrics")
	}
	sm := serviceMonitor(iec, routerName(iec), componentFront, "https", "/metrics")
	// The certificate is the clients' (any issuer, possibly a public one
	// for another name): Prometheus reads metrics over it unverified, as
	// the kubelet's probes do. Metrics carry no tenant data.
	eps, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	ep := eps[0].(map[string]any)
	ep["scheme"] = "https"
	ep["tlsConfig"] = map[string]any{"insecureSkipVerify": true}
	_ = unstructured.SetNestedSlice(sm.Object, eps, "spec", "endpoints")
	return sm
}

// promLabelName is how Prometheus' Kubernetes discovery spells a
// Kubernetes label in its meta labels: every character not valid in a
// Prometheus label name becomes an underscore.
func promLabelName(k8sLabel string) string {
	b := []byte(k8sLabel)
	for i, c := range b {
		valid := c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !valid {
			b[i] = '_'
		}
	}
	return string(b)
}
