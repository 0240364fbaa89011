package controller_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	v1alpha1 "github.com/warmpath/warmpath/services/operator/api/v1alpha1"
)

// TestIngress: intelligentRoutingSpec.ingress makes an Ingress owned by the
// endpoint that sends host and path to the endpoint Service's port (443
// when the router serves TLS), with the ingress controller's TLS section
// when the field names a Secret; removing the field deletes it.
func TestIngress(t *testing.T) {
	c := cluster(t)
	ns := namespace(t, c)
	for i, tt := range []struct {
		name    string
		routing bool
		// routerTLS is intelligentRoutingSpec.tlsSecretName.
		routerTLS string
		ingress   v1alpha1.RouterIngress
		wantPath  string
		wantPort  int32
	}{
		{"plain", true, "", v1alpha1.RouterIngress{ClassName: "nginx", Host: "llm.example.com"}, "/", 80},
		{"router and ingress TLS", true, "router-cert", v1alpha1.RouterIngress{
			Host: "llm.example.com", Path: "/v1", TLSSecretName: "edge-cert",
			Annotations: map[string]string{"nginx.ingress.kubernetes.io/backend-protocol": "HTTPS"},
		}, "/v1", 443},
		// Without routing the Service selects the workers, still on 80,
		// and tlsSecretName has no effect.
		{"routing off, any host", false, "router-cert", v1alpha1.RouterIngress{TLSSecretName: "edge-cert"}, "/", 80},
	} {
		t.Run(tt.name, func(t *testing.T) {
			iec := minimal(ns, fmt.Sprintf("ing%d", i))
			iec.Spec.IntelligentRoutingSpec.Enabled = ptr.To(tt.routing)
			iec.Spec.IntelligentRoutingSpec.TLSSecretName = tt.routerTLS
			iec.Spec.IntelligentRoutingSpec.Ingress = tt.ingress.DeepCopy()
			if err := c.Create(context.Background(), iec); err != nil {
				t.Fatal(err)
			}
			var ing networkingv1.Ingress
			get(t, c, ns, iec.Name, &ing)
			if ref := metav1.GetControllerOf(&ing); ref == nil || ref.UID != iec.UID {
				t.Errorf("controller reference %+v, want the endpoint", ref)
			}
			if got := ptr.Deref(ing.Spec.IngressClassName, ""); got != tt.ingress.ClassName {
				t.Errorf("ingressClassName %q, want %q", got, tt.ingress.ClassName)
			}
			for k, v := range tt.ingress.Annotations {
				if ing.Annotations[k] != v {
					t.Errorf("annotation %s = %q, want %q", k, ing.Annotations[k], v)
				}
			}
			if len(ing.Spec.Rules) != 1 || ing.Spec.Rules[0].HTTP == nil || len(ing.Spec.Rules[0].HTTP.Paths) != 1 {
				t.Fatalf("rules %+v, want one with one path", ing.Spec.Rules)
			}
			rule := ing.Spec.Rules[0]
			p := rule.HTTP.Paths[0]
			backend := p.Backend.Service
			if rule.Host != tt.ingress.Host || p.Path != tt.wantPath || ptr.Deref(p.PathType, "") != networkingv1.PathTypePrefix ||
				backend == nil || backend.Name != iec.Name || backend.Port.Number != tt.wantPort {
				t.Errorf("rule host %q path %q (%v) backend %+v, want %q %q (Prefix) to Service %s port %d",
					rule.Host, p.Path, ptr.Deref(p.PathType, ""), backend, tt.ingress.Host, tt.wantPath, iec.Name, tt.wantPort)
			}
			var wantTLS []networkingv1.IngressTLS
			if tt.ingress.TLSSecretName != "" {
				wantTLS = []networkingv1.IngressTLS{{SecretName: tt.ingress.TLSSecretName}}
				if tt.ingress.Host != "" {
					wantTLS[0].Hosts = []string{tt.ingress.Host}
				}
			}
			if fmt.Sprint(ing.Spec.TLS) != fmt.Sprint(wantTLS) {
				t.Errorf("tls %+v, want %+v", ing.Spec.TLS, wantTLS)
			}

			editSpec(t, c, iec, func(e *v1alpha1.InferenceEndpointConfig) { e.Spec.IntelligentRoutingSpec.Ingress = nil })
			gone(t, c, ns, iec.Name, &networkingv1.Ingress{})
		})
	}
}

// TestHTTPRoute: without the Gateway API's CRDs, httpRoute creates nothing
// and says so in HTTPRouteReady while the endpoint still becomes Ready;
// once the CRD is installed the HTTPRoute appears, attached to parentRefs
// and sending hostnames to the endpoint Service's port, follows the
// router's TLS to 443, and goes with the field.
func TestHTTPRoute(t *testing.T) {
	c := cluster(t)
	ns := namespace(t, c)
	iec := minimal(ns, "gw")
	iec.Spec.IntelligentRoutingSpec.Enabled = ptr.To(true)
	iec.Spec.IntelligentRoutingSpec.HTTPRoute = &v1alpha1.RouterHTTPRoute{
		ParentRefs:  []v1alpha1.GatewayParentRef{{Name: "edge", Namespace: "gateways", SectionName: "https"}, {Name: "internal"}},
		Hostnames:   []string{"llm.example.com"},
		Annotations: map[string]string{"example.com/team": "inference"},
	}
	if err := c.Create(context.Background(), iec); err != nil {
		t.Fatal(err)
	}
	routeCond := func(want metav1.ConditionStatus, reason string) {
		t.Helper()
		waitStatus(t, c, iec, "HTTPRouteReady "+reason, func(cur *v1alpha1.InferenceEndpointConfig) error {
			cond := meta.FindStatusCondition(cur.Status.Conditions, v1alpha1.ConditionHTTPRouteReady)
			if reason == "" {
				if cond != nil {
					return fmt.Errorf("condition %+v, want none", cond)
				}
				return nil
			}
			if cond == nil || cond.Status != want || cond.Reason != reason || cond.Message == "" || cond.ObservedGeneration != cur.Generation {
				return fmt.Errorf("condition %+v", cond)
			}
			return nil
		})
	}
	routeCond(metav1.ConditionFalse, "CRDNotInstalled")
	// The endpoint serves in the cluster without its route: Ready as
	// ever once its Deployments are.
	setReady(t, c, ns, "gw-worker", 1)
	setReady(t, c, ns, "gw-router", 1)
	waitStatus(t, c, iec, "Ready without the HTTPRoute", func(cur *v1alpha1.InferenceEndpointConfig) error {
		if !meta.IsStatusConditionTrue(cur.Status.Conditions, v1alpha1.ConditionReady) || cur.Status.State != v1alpha1.StateComplete {
			return fmt.Errorf("state %q, conditions %+v", cur.Status.State, cur.Status.Conditions)
		}
		return nil
	})
	err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "gw"}, &gatewayv1.HTTPRoute{})
	if !meta.IsNoMatchError(err) && !apierrors.IsNotFound(err) {
		t.Fatalf("reading an HTTPRoute before its CRD: %v, want no such kind", err)
	}

	if _, err := envtest.InstallCRDs(suite.cfg, envtest.CRDInstallOptions{
		Paths: []string{filepath.Join("testdata", "gateway-api")}, ErrorIfPathMissing: true,
	}); err != nil {
		t.Fatal(err)
	}
	// The operator looks again on its next reconcile; a spec change is
	// the quickest way to get one.
	editSpec(t, c, iec, func(e *v1alpha1.InferenceEndpointConfig) {
		e.Spec.IntelligentRoutingSpec.HTTPRoute.Hostnames = append(e.Spec.IntelligentRoutingSpec.HTTPRoute.Hostnames, "*.llm.example.com")
	})
	routeCond(metav1.ConditionTrue, "Created")
	backendPort := func(wantPort gatewayv1.PortNumber) {
		t.Helper()
		eventually(t, fmt.Sprintf("HTTPRoute to port %d", wantPort), func() error {
			var route gatewayv1.HTTPRoute
			if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "gw"}, &route); err != nil {
				return err
			}
			if ref := metav1.GetControllerOf(&route); ref == nil || ref.UID != iec.UID {
				return fmt.Errorf("controller reference %+v, want the endpoint", ref)
			}
			if route.Annotations["example.com/team"] != "inference" {
				return fmt.Errorf("annotations %v", route.Annotations)
			}
			wantParents := []gatewayv1.ParentReference{
				{Name: "edge", Namespace: ptr.To[gatewayv1.Namespace]("gateways"), SectionName: ptr.To[gatewayv1.SectionName]("https")},
				{Name: "internal"},
			}
			if len(route.Spec.ParentRefs) != len(wantParents) {
				return fmt.Errorf("parentRefs %+v, want %+v", route.Spec.ParentRefs, wantParents)
			}
			for i, want := range wantParents {
				got := route.Spec.ParentRefs[i]
				if got.Name != want.Name || ptr.Deref(got.Namespace, "") != ptr.Deref(want.Namespace, "") ||
					ptr.Deref(got.SectionName, "") != ptr.Deref(want.SectionName, "") {
					return fmt.Errorf("parentRefs[%d] %+v, want %+v", i, got, want)
				}
			}
			if fmt.Sprint(route.Spec.Hostnames) != "[llm.example.com *.llm.example.com]" {
				return fmt.Errorf("hostnames %v", route.Spec.Hostnames)
			}
			if len(route.Spec.Rules) != 1 || len(route.Spec.Rules[0].BackendRefs) != 1 {
				return fmt.Errorf("rules %+v, want one with one backendRef", route.Spec.Rules)
			}
			b := route.Spec.Rules[0].BackendRefs[0].BackendObjectReference
			if b.Name != "gw" || ptr.Deref(b.Kind, "") != "Service" || ptr.Deref(b.Group, "x") != "" || ptr.Deref(b.Port, 0) != wantPort {
				return fmt.Errorf("backendRef %+v, want Service gw port %d", b, wantPort)
			}
			return nil
		})
	}
	backendPort(80)
	editSpec(t, c, iec, func(e *v1alpha1.InferenceEndpointConfig) { e.Spec.IntelligentRoutingSpec.TLSSecretName = "router-cert" })
	backendPort(443)

	editSpec(t, c, iec, func(e *v1alpha1.InferenceEndpointConfig) { e.Spec.IntelligentRoutingSpec.HTTPRoute = nil })
	gone(t, c, ns, "gw", &gatewayv1.HTTPRoute{})
	routeCond("", "")
}

// TestExposureSpecsRejected: the schema refuses what an Ingress or
// HTTPRoute would, before the operator tries to apply it.
func TestExposureSpecsRejected(t *testing.T) {
	c := cluster(t)
	ns := namespace(t, c)
	for i, tt := range []struct {
		name string
		edit func(*v1alpha1.IntelligentRoutingSpec)
		want string
	}{
		{"host with a port", func(s *v1alpha1.IntelligentRoutingSpec) {
			s.Ingress = &v1alpha1.RouterIngress{Host: "llm.example.com:443"}
		}, "spec.intelligentRoutingSpec.ingress.host in body should match"},
		{"relative path", func(s *v1alpha1.IntelligentRoutingSpec) { s.Ingress = &v1alpha1.RouterIngress{Path: "v1"} },
			"spec.intelligentRoutingSpec.ingress.path in body should match"},
		{"no parentRefs", func(s *v1alpha1.IntelligentRoutingSpec) { s.HTTPRoute = &v1alpha1.RouterHTTPRoute{} },
			"spec.intelligentRoutingSpec.httpRoute.parentRefs"},
		{"upper-case hostname", func(s *v1alpha1.IntelligentRoutingSpec) {
			s.HTTPRoute = &v1alpha1.RouterHTTPRoute{ParentRefs: []v1alpha1.GatewayParentRef{{Name: "edge"}}, Hostnames: []string{"LLM.example.com"}}
		}, "spec.intelligentRoutingSpec.httpRoute.hostnames[0] in body should match"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			iec := minimal(ns, fmt.Sprintf("bad%d", i))
			tt.edit(&iec.Spec.IntelligentRoutingSpec)
			err := c.Create(context.Background(), iec)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
}
