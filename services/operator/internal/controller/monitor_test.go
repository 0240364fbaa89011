package controller_test

import (
	"context"
	"fmt"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	v1alpha1 "github.com/warmpath/warmpath/services/operator/api/v1alpha1"
	"github.com/warmpath/warmpath/services/operator/internal/controller"
)

// serviceMonitorCRD is the Prometheus Operator's CRD reduced to what the
// API server needs to store ServiceMonitors (its full schema is not
// vendored here).
func serviceMonitorCRD() *apiextensionsv1.CustomResourceDefinition {
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "servicemonitors.monitoring.coreos.com"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "monitoring.coreos.com",
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "servicemonitors", Singular: "servicemonitor", Kind: "ServiceMonitor", ListKind: "ServiceMonitorList"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: ptr.To(true),
				}},
			}},
		},
	}
}

// TestServiceMonitor checks the ServiceMonitors are skipped (and said so
// in status) while the Prometheus Operator's CRD is absent, created once
// it is installed, and removed when metrics are disabled.
func TestServiceMonitor(t *testing.T) {
	c := cluster(t)
	ns := namespace(t, c)
	iec := minimal(ns, "m")
	iec.Spec.IntelligentRoutingSpec.Enabled = ptr.To(true)
	iec.Spec.Metrics.MetricsScrapeIntervalSeconds = ptr.To[int32](30)
	if err := c.Create(context.Background(), iec); err != nil {
		t.Fatal(err)
	}
	monitorCond := func(reason string) {
		t.Helper()
		eventually(t, "ServiceMonitorReady "+reason, func() error {
			var cur v1alpha1.InferenceEndpointConfig
			if err := c.Get(context.Background(), client.ObjectKeyFromObject(iec), &cur); err != nil {
				return err
			}
			cond := meta.FindStatusCondition(cur.Status.Conditions, controller.ConditionServiceMonitor)
			if cond == nil || cond.Reason != reason || cond.ObservedGeneration != cur.Generation {
				return fmt.Errorf("condition %+v", cond)
			}
			return nil
		})
	}
	monitorCond("CRDNotInstalled")

	if _, err := envtest.InstallCRDs(suite.cfg, envtest.CRDInstallOptions{CRDs: []*apiextensionsv1.CustomResourceDefinition{serviceMonitorCRD()}}); err != nil {
		t.Fatal(err)
	}
	// The operator looks again on its next reconcile; a spec change is
	// the quickest way to get one.
	edit := func(f func(*v1alpha1.InferenceEndpointConfig)) {
		t.Helper()
		eventually(t, "updating the endpoint", func() error {
			var cur v1alpha1.InferenceEndpointConfig
			if err := c.Get(context.Background(), client.ObjectKeyFromObject(iec), &cur); err != nil {
				return err
			}
			f(&cur)
			return c.Update(context.Background(), &cur)
		})
	}
	edit(func(e *v1alpha1.InferenceEndpointConfig) {
		e.Spec.Metrics.MetricsScrapeIntervalSeconds = ptr.To[int32](20)
	})
	monitorCond("Created")
	for _, name := range []string{"m-worker", "m-router"} {
		sm := &unstructured.Unstructured{}
		sm.SetGroupVersionKind(controller.ServiceMonitorGVK)
		get(t, c, ns, name, sm)
		if ref := metav1.GetControllerOf(sm); ref == nil || ref.UID != iec.UID {
			t.Errorf("%s: controller reference %+v", name, ref)
		}
		eps, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
		if len(eps) != 1 || eps[0].(map[string]any)["interval"] != "20s" {
			t.Errorf("%s endpoints %v, want one with interval 20s", name, eps)
			continue
		}
		// The Prometheus Operator labels each target's endpoint with the
		// port's name ("http"); the dashboards' Endpoint variable means the
		// InferenceEndpointConfig, so a relabeling sets it from the
		// Service's label.
		relabel, _, _ := unstructured.NestedSlice(eps[0].(map[string]any), "relabelings")
		want := map[string]any{"sourceLabels": []any{"__meta_kubernetes_service_label_inference_warmpath_io_endpoint"}, "targetLabel": "endpoint", "action": "replace"}
		if len(relabel) != 1 || !equality.Semantic.DeepEqual(relabel[0], want) {
			t.Errorf("%s relabelings %v, want [%v]", name, relabel, want)
		}
	}

	edit(func(e *v1alpha1.InferenceEndpointConfig) { e.Spec.Metrics.Enabled = ptr.To(false) })
	monitorCond("MetricsDisabled")
	for _, name := range []string{"m-worker", "m-router"} {
		sm := &unstructured.Unstructured{}
		sm.SetGroupVersionKind(controller.ServiceMonitorGVK)
		gone(t, c, ns, name, sm)
	}
}
