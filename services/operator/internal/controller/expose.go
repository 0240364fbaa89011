package controller

import (
	"context"
	"fmt"

	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	v1alpha1 "github.com/warmpath/warmpath/services/operator/api/v1alpha1"
)

// endpointIngress is the Ingress of intelligentRoutingSpec.ingress (spec):
// host and path to the endpoint Service, named like it, with the ingress
// controller's own TLS termination when tlsSecretName is set.
func endpointIngress(iec *v1alpha1.InferenceEndpointConfig, spec *v1alpha1.RouterIngress) *networkingv1.Ingress {
	ing := &networkingv1.Ingress{ObjectMeta: objectMeta(iec, iec.Name, componentFront)}
	ing.Annotations = spec.Annotations
	if spec.ClassName != "" {
		ing.Spec.IngressClassName = ptr.To(spec.ClassName)
	}
	path := spec.Path
	if path == "" {
		path = "/"
	}
	_, port := frontPort(iec)
	ing.Spec.Rules = []networkingv1.IngressRule{{
		Host: spec.Host,
		IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{
			Paths: []networkingv1.HTTPIngressPath{{
				Path:     path,
				PathType: ptr.To(networkingv1.PathTypePrefix),
				Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{
					Name: iec.Name, Port: networkingv1.ServiceBackendPort{Number: port},
				}},
			}},
		}},
	}}
	if spec.TLSSecretName != "" {
		tls := networkingv1.IngressTLS{SecretName: spec.TLSSecretName}
		if spec.Host != "" {
			tls.Hosts = []string{spec.Host}
		}
		ing.Spec.TLS = []networkingv1.IngressTLS{tls}
	}
	return ing
}

// endpointHTTPRoute is the HTTPRoute of intelligentRoutingSpec.httpRoute
// (spec): every request the parent Gateways admit for hostnames goes to
// the endpoint Service, named like it.
func endpointHTTPRoute(iec *v1alpha1.InferenceEndpointConfig, spec *v1alpha1.RouterHTTPRoute) *gatewayv1.HTTPRoute {
	route := &gatewayv1.HTTPRoute{ObjectMeta: objectMeta(iec, iec.Name, componentFront)}
	route.Annotations = spec.Annotations
	for _, p := range spec.ParentRefs {
		ref := gatewayv1.ParentReference{Name: gatewayv1.ObjectName(p.Name)}
		if p.Namespace != "" {
			ref.Namespace = ptr.To(gatewayv1.Namespace(p.Namespace))
		}
		if p.SectionName != "" {
			ref.SectionName = ptr.To(gatewayv1.SectionName(p.SectionName))
		}
		route.Spec.ParentRefs = append(route.Spec.ParentRefs, ref)
	}
	for _, h := range spec.Hostnames {
		route.Spec.Hostnames = append(route.Spec.Hostnames, gatewayv1.Hostname(h))
	}
	_, port := frontPort(iec)
	// No matches: the API server defaults them to PathPrefix "/", and that
	// default is its field, not the operator's.
	route.Spec.Rules = []gatewayv1.HTTPRouteRule{{
		BackendRefs: []gatewayv1.HTTPBackendRef{{BackendRef: gatewayv1.BackendRef{
			BackendObjectReference: gatewayv1.BackendObjectReference{
				Name: gatewayv1.ObjectName(iec.Name), Port: ptr.To(port),
			},
		}}},
	}}
	return route
}

// applyExposure applies the Ingress and HTTPRoute the spec asks for and
// queues the unasked ones for deletion. The HTTPRoute is skipped, not
// failed, where the Gateway API is not installed; the returned condition
// (nil without httpRoute) says so.
func (r *Reconciler) applyExposure(ctx context.Context, iec *v1alpha1.InferenceEndpointConfig, unwanted *[]client.Object) (*metav1.Condition, error) {
	rs := iec.Spec.IntelligentRoutingSpec
	// Deletion needs only the kind and name.
	key := objectMeta(iec, iec.Name, componentFront)
	if rs.Ingress != nil {
		if err := r.apply(ctx, iec, endpointIngress(iec, rs.Ingress)); err != nil {
			return nil, err
		}
	} else {
		*unwanted = append(*unwanted, &networkingv1.Ingress{ObjectMeta: key})
	}
	if rs.HTTPRoute == nil {
		// deleteOwned finds nothing to delete where the CRD is absent.
		*unwanted = append(*unwanted, &gatewayv1.HTTPRoute{ObjectMeta: key})
		return nil, nil
	}
	cond := &metav1.Condition{Type: v1alpha1.ConditionHTTPRouteReady, ObservedGeneration: iec.Generation}
	// The Gateway API's CRDs are not part of Kubernetes: look for them on
	// every reconcile. HTTPRoutes are not watched, as an informer could not
	// start without the CRD; the periodic requeue restores drift.
	installed, err := r.kindInstalled(schema.GroupKind{Group: gatewayv1.GroupName, Kind: "HTTPRoute"}, gatewayv1.GroupVersion.Version)
	if err != nil {
		return nil, err
	}
	if !installed {
		cond.Status, cond.Reason = metav1.ConditionFalse, "CRDNotInstalled"
		cond.Message = "gateway.networking.k8s.io/v1 HTTPRoute is not installed, so none was created; install the Gateway API CRDs " +
			"and a Gateway controller (the operator looks again every 5 minutes) or use intelligentRoutingSpec.ingress"
		return cond, nil
	}
	if err := r.apply(ctx, iec, endpointHTTPRoute(iec, rs.HTTPRoute)); err != nil {
		return nil, err
	}
	_, port := frontPort(iec)
	cond.Status, cond.Reason = metav1.ConditionTrue, "Created"
	cond.Message = fmt.Sprintf("HTTPRoute %s sends the Gateway's requests to Service %s port %d; its status.parents tell whether a Gateway accepted it", iec.Name, iec.Name, port)
	return cond, nil
}

// setHTTPRouteCondition records cond, or drops the condition when the
// spec has no httpRoute (cond nil).
func setHTTPRouteCondition(iec *v1alpha1.InferenceEndpointConfig, cond *metav1.Condition) {
	if cond == nil {
		meta.RemoveStatusCondition(&iec.Status.Conditions, v1alpha1.ConditionHTTPRouteReady)
		return
	}
	meta.SetStatusCondition(&iec.Status.Conditions, *cond)
}
