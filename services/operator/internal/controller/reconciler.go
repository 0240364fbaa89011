// Package controller reconciles InferenceEndpointConfig resources into
// their workers, router and cache wiring, by server-side apply.
package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	v1alpha1 "github.com/warmpath/warmpath/services/operator/api/v1alpha1"
)

// ConditionServiceMonitor reports whether ServiceMonitors were created.
// It does not count towards Ready: metrics are optional.
const ConditionServiceMonitor = "ServiceMonitorReady"

// Reconciler turns an InferenceEndpointConfig into its children.
type Reconciler struct {
	Client client.Client
	// APIReader reads objects the operator does not cache (the cache
	// server's DaemonSet). Nil means Client.
	APIReader client.Reader
	Scheme    *runtime.Scheme
	Recorder  recorder.EventRecorder
	Options   Options
}

// +kubebuilder:rbac:groups=inference.warmpath.io,resources=inferenceendpointconfigs,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=inference.warmpath.io,resources=inferenceendpointconfigs/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=services;configmaps;serviceaccounts,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create;update;patch;delete
// The router's Role grants endpointslices get/list/watch, which the
// operator holds itself (below): the API server then lets it create the
// Role and bind it without the escalate or bind verbs, so it is never
// given the power to grant what it does not hold.
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=roles;rolebindings,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=apps,resources=daemonsets,verbs=get
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=get;list;watch
// +kubebuilder:rbac:groups=monitoring.coreos.com,resources=servicemonitors,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=networking.k8s.io,resources=ingresses,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=gateway.networking.k8s.io,resources=httproutes,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=autoscaling,resources=horizontalpodautoscalers,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=keda.sh,resources=scaledobjects,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// Leader election records its events ("became leader") through client-go's
// core/v1 recorder, which controller-runtime still uses for the Lease
// (kubernetes/kubernetes#82846): without the core group those are refused.
// It is the same Event resource as events.k8s.io's, so this grants nothing
// the rule above does not.
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// Worker pods are read, never written, for WorkersScheduled: list and
// watch feed the cache, which every read goes through.
// +kubebuilder:rbac:groups="",resources=pods,verbs=list;watch

// SetupWithManager registers the reconciler, watching the resource and
// every child kind it owns, so drift on a child is corrected at once, and
// the worker pods whose scheduling WorkersScheduled reports.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.InferenceEndpointConfig{}).
		Owns(&appsv1.Deployment{}).
		Owns(&corev1.Service{}).
		Owns(&corev1.ConfigMap{}).
		Owns(&corev1.ServiceAccount{}).
		Owns(&rbacv1.Role{}).
		Owns(&rbacv1.RoleBinding{}).
		Owns(&policyv1.PodDisruptionBudget{}).
		Owns(&networkingv1.Ingress{}).
		Owns(&autoscalingv2.HorizontalPodAutoscaler{}).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(endpointOfPod), builder.WithPredicates(schedulingChanged())).
		Named("inferenceendpointconfig").
		Complete(r)
}

// Reconcile applies the desired children and updates the status.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var iec v1alpha1.InferenceEndpointConfig
	if err := r.Client.Get(ctx, req.NamespacedName, &iec); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !iec.DeletionTimestamp.IsZero() {
		// Children carry ownerReferences: the garbage collector removes
		// them, nothing to do here.
		return ctrl.Result{}, nil
	}
	before := iec.Status.DeepCopy()
	conds, err := r.applyChildren(ctx, &iec)
	var invalid *invalidWorkerResourcesError
	if errors.As(err, &invalid) {
		// Only a spec change can fix it, and one is reconciled at once:
		// reported, not retried.
		r.setInvalidWorkerResources(&iec, invalid)
		return ctrl.Result{}, r.writeStatus(ctx, &iec, before)
	}
	if err != nil {
		r.setFailed(&iec, err)
		if serr := r.writeStatus(ctx, &iec, before); serr != nil {
			return ctrl.Result{}, errors.Join(err, serr)
		}
		return ctrl.Result{}, err
	}
	if err := r.observe(ctx, &iec, conds); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.writeStatus(ctx, &iec, before); err != nil {
		return ctrl.Result{}, err
	}
	// The cache server's DaemonSet is not watched: while it is not ready,
	// look again soon. The ServiceMonitor and HTTPRoute CRDs may be
	// installed later, and HTTPRoutes are not watched; look again now and
	// then.
	if meta.IsStatusConditionFalse(iec.Status.Conditions, v1alpha1.ConditionCacheReady) {
		return ctrl.Result{RequeueAfter: 30 * time.Second}, nil
	}
	return ctrl.Result{RequeueAfter: 5 * time.Minute}, nil
}

// childConditions are the conditions applying the optional children
// decides, which observe records.
type childConditions struct {
	monitor metav1.Condition
	// httpRoute is nil when the spec has no httpRoute.
	httpRoute *metav1.Condition
	// autoscaler is nil when the spec has no autoScalingSpec.
	autoscaler *metav1.Condition
}

func (r *Reconciler) applyChildren(ctx context.Context, iec *v1alpha1.InferenceEndpointConfig) (childConditions, error) {
	var conds childConditions
	// While an autoscaler owns the worker count, the operator's apply
	// leaves replicas out; see handOverReplicas.
	var keda bool
	if autoscaling(iec) != nil {
		var err error
		if keda, err = r.kindInstalled(ScaledObjectGVK.GroupKind(), ScaledObjectGVK.Version); err != nil {
			return conds, err
		}
		if err := r.handOverReplicas(ctx, iec, keda); err != nil {
			return conds, err
		}
	}
	desired := []client.Object{workerService(iec), workerDeployment(iec, r.Options), workerPDB(iec), frontService(iec)}
	var unwanted []client.Object
	if iec.Spec.KVCacheSpec.CacheConfigFile != "" {
		desired = append(desired, lmcacheConfigMap(iec))
	} else {
		unwanted = append(unwanted, lmcacheConfigMap(iec))
	}
	router := []client.Object{routerConfigMap(iec), routerServiceAccount(iec), routerRole(iec), routerRoleBinding(iec), routerDeployment(iec, r.Options), routerPDB(iec), routerPeersService(iec)}
	if routingEnabled(iec) {
		desired = append(desired, router...)
	} else {
		unwanted = append(unwanted, router...)
	}
	// Read what the router and workers run now (from the cache) to tell
	// users, by events, when this reconcile changes them.
	var oldRouterCfg corev1.ConfigMap
	routerCfgErr := r.Client.Get(ctx, client.ObjectKey{Namespace: iec.Namespace, Name: routerName(iec)}, &oldRouterCfg)
	workersErr := r.Client.Get(ctx, client.ObjectKey{Namespace: iec.Namespace, Name: workerName(iec)}, &appsv1.Deployment{})
	for _, obj := range desired {
		if err := r.apply(ctx, iec, obj); err != nil {
			if _, ok := obj.(*appsv1.Deployment); ok && obj.GetName() == workerName(iec) && refusedForResources(err) {
				return conds, &invalidWorkerResourcesError{err: err}
			}
			return conds, err
		}
	}
	if autoscaling(iec) != nil && apierrors.IsNotFound(workersErr) {
		// Created without replicas: start at the autoscaler's minimum.
		if err := r.handOverReplicas(ctx, iec, keda); err != nil {
			return conds, err
		}
	}
	if apierrors.IsNotFound(workersErr) {
		r.Recorder.Eventf(iec, nil, corev1.EventTypeNormal, "Created", "Create", "created workers %s (%s), routing enabled: %v",
			workerName(iec), replicasNote(iec), routingEnabled(iec))
	}
	if routingEnabled(iec) && routerCfgErr == nil && oldRouterCfg.Data[RouterConfigKey] != routerConfigYAML(iec) {
		r.Recorder.Eventf(iec, nil, corev1.EventTypeNormal, "RouterConfigChanged", "Update",
			"routing configuration updated (strategy %s); the router reloads it without a restart", iec.Spec.IntelligentRoutingSpec.RoutingStrategy)
	}
	var err error
	if conds.monitor, err = r.applyMonitors(ctx, iec, &unwanted); err != nil {
		return conds, err
	}
	if conds.httpRoute, err = r.applyExposure(ctx, iec, &unwanted); err != nil {
		return conds, err
	}
	if conds.autoscaler, err = r.applyAutoscaler(ctx, iec, keda, &unwanted); err != nil {
		return conds, err
	}
	for _, obj := range unwanted {
		if err := r.deleteOwned(ctx, iec, obj); err != nil {
			return conds, err
		}
	}
	return conds, nil
}

func (r *Reconciler) applyMonitors(ctx context.Context, iec *v1alpha1.InferenceEndpointConfig, unwanted *[]client.Object) (metav1.Condition, error) {
	cond := metav1.Condition{Type: ConditionServiceMonitor, ObservedGeneration: iec.Generation}
	monitors := []client.Object{workerServiceMonitor(iec)}
	if routingEnabled(iec) {
		monitors = append(monitors, routerServiceMonitor(iec))
	}
	installed, err := r.kindInstalled(ServiceMonitorGVK.GroupKind(), ServiceMonitorGVK.Version)
	switch {
	case err != nil:
		return cond, err
	case !installed:
		cond.Status, cond.Reason = metav1.ConditionFalse, "CRDNotInstalled"
		cond.Message = "monitoring.coreos.com/v1 ServiceMonitor is not installed, so none was created; install the Prometheus Operator " +
			"(the operator looks again every 5 minutes) or scrape the Service " + WorkerServiceName(iec) + " yourself"
		return cond, nil
	case !isTrue(iec.Spec.Metrics.Enabled, true):
		*unwanted = append(*unwanted, workerServiceMonitor(iec), routerServiceMonitor(iec))
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, "MetricsDisabled", "spec.metrics.enabled is false"
		return cond, nil
	}
	if !routingEnabled(iec) {
		*unwanted = append(*unwanted, routerServiceMonitor(iec))
	}
	for _, m := range monitors {
		if err := r.apply(ctx, iec, m); err != nil {
			return cond, err
		}
	}
	cond.Status, cond.Reason, cond.Message = metav1.ConditionTrue, "Created", fmt.Sprintf("%d ServiceMonitor(s) scrape the endpoint", len(monitors))
	return cond, nil
}

// kindInstalled says whether the API server serves gk at version, a kind
// of an optional CRD (ServiceMonitor, HTTPRoute). The manager's RESTMapper
// rediscovers a group it does not know yet, so a CRD installed after the
// operator started is found on a later reconcile.
func (r *Reconciler) kindInstalled(gk schema.GroupKind, version string) (bool, error) {
	_, err := r.Client.RESTMapper().RESTMapping(gk, version)
	switch {
	case err == nil:
		return true, nil
	case meta.IsNoMatchError(err):
		return false, nil
	default:
		return false, fmt.Errorf("looking up the %s API: %w", gk.Kind, err)
	}
}

// apply server-side applies obj as the operator's field manager, owned by
// iec. Fields other managers set (an HPA's replicas, an admission
// webhook's sidecar) are left alone; fields the operator sets are forced
// back when someone else changed them.
func (r *Reconciler) apply(ctx context.Context, iec *v1alpha1.InferenceEndpointConfig, obj client.Object) error {
	gvk, err := apiutil.GVKForObject(obj, r.Scheme)
	if err != nil {
		return fmt.Errorf("apply %T: %w", obj, err)
	}
	if err := controllerutil.SetControllerReference(iec, obj, r.Scheme); err != nil {
		return fmt.Errorf("apply %s %s: %w", gvk.Kind, obj.GetName(), err)
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
		if err != nil {
			return fmt.Errorf("apply %s %s: %w", gvk.Kind, obj.GetName(), err)
		}
		u = &unstructured.Unstructured{Object: m}
		// Typed objects carry zero timestamps and an empty status that
		// would otherwise be applied (and owned) as fields.
		unstructured.RemoveNestedField(m, "metadata", "creationTimestamp")
		unstructured.RemoveNestedField(m, "spec", "template", "metadata", "creationTimestamp")
		unstructured.RemoveNestedField(m, "status")
	}
	u.SetGroupVersionKind(gvk)
	if err := r.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		return fmt.Errorf("apply %s %s/%s: %w%s", gvk.Kind, obj.GetNamespace(), obj.GetName(), err, r.foreignHint(ctx, iec, gvk, obj))
	}
	return nil
}

// foreignHint explains the usual cause of a failed apply: an object of the
// same name that this endpoint does not control.
func (r *Reconciler) foreignHint(ctx context.Context, iec *v1alpha1.InferenceEndpointConfig, gvk schema.GroupVersionKind, obj client.Object) string {
	cur := &unstructured.Unstructured{}
	cur.SetGroupVersionKind(gvk)
	if err := r.Client.Get(ctx, client.ObjectKeyFromObject(obj), cur); err != nil {
		return ""
	}
	if ref := metav1.GetControllerOf(cur); ref != nil && ref.UID == iec.UID {
		return ""
	}
	return fmt.Sprintf("; %s %s already exists and was not created by this endpoint: delete or rename it, or rename the endpoint", gvk.Kind, obj.GetName())
}

// deleteOwned deletes obj if it exists and iec controls it; objects of the
// same name the operator did not create are left alone.
func (r *Reconciler) deleteOwned(ctx context.Context, iec *v1alpha1.InferenceEndpointConfig, obj client.Object) error {
	gvk, err := apiutil.GVKForObject(obj, r.Scheme)
	if err != nil {
		return fmt.Errorf("delete %T: %w", obj, err)
	}
	cur := &unstructured.Unstructured{}
	cur.SetGroupVersionKind(gvk)
	err = r.Client.Get(ctx, client.ObjectKeyFromObject(obj), cur)
	switch {
	case apierrors.IsNotFound(err) || meta.IsNoMatchError(err):
		return nil
	case err != nil:
		return fmt.Errorf("delete %s %s: %w", gvk.Kind, obj.GetName(), err)
	}
	if ref := metav1.GetControllerOf(cur); ref == nil || ref.UID != iec.UID {
		return nil
	}
	if err := r.Client.Delete(ctx, cur, client.Preconditions{UID: ptrUID(cur.GetUID())}); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("delete %s %s: %w", gvk.Kind, obj.GetName(), err)
	}
	r.Recorder.Eventf(iec, cur, corev1.EventTypeNormal, "Deleted", "Delete", "deleted %s %s, no longer needed by the spec", gvk.Kind, cur.GetName())
	return nil
}

func ptrUID(u types.UID) *types.UID { return &u }

// uncached reads from the API server, for what must not be stale.
func (r *Reconciler) uncached() client.Reader {
	if r.APIReader == nil {
		return r.Client
	}
	return r.APIReader
}
