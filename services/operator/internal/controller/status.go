package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	labelsel "k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/warmpath/warmpath/services/operator/api/v1alpha1"
)

// observe reads the children's readiness into iec's status.
func (r *Reconciler) observe(ctx context.Context, iec *v1alpha1.InferenceEndpointConfig, conds childConditions) error {
	gen := iec.Generation
	st := &iec.Status
	desired := int32Or(iec.Spec.Replicas, 1)

	var workers appsv1.Deployment
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: iec.Namespace, Name: workerName(iec)}, &workers); err != nil {
		return fmt.Errorf("reading the worker Deployment: %w", err)
	}
	zero := "spec.replicas is 0"
	if autoscaling(iec) != nil {
		// The autoscaler's choice, not the spec's.
		desired, zero = ptr.Deref(workers.Spec.Replicas, 1), "the autoscaler scaled the workers to zero"
	}
	st.DesiredWorkers, st.ReadyWorkers = desired, workers.Status.ReadyReplicas
	st.Workers = fmt.Sprintf("%d/%d", st.ReadyWorkers, desired)
	st.Replicas = workers.Status.Replicas
	st.Selector = labelsel.SelectorFromSet(selectorLabels(iec, componentWorker)).String()
	wc := metav1.Condition{Type: v1alpha1.ConditionWorkersReady, ObservedGeneration: gen}
	switch {
	case desired == 0:
		wc.Status, wc.Reason, wc.Message = metav1.ConditionTrue, "ScaledToZero", zero
	case deploymentDone(&workers, desired):
		wc.Status, wc.Reason, wc.Message = metav1.ConditionTrue, "WorkersAvailable", fmt.Sprintf("%d/%d workers ready", st.ReadyWorkers, desired)
	default:
		wc.Status, wc.Reason = metav1.ConditionFalse, "WorkersNotReady"
		wc.Message = fmt.Sprintf("%d/%d workers ready (%d updated); see `kubectl -n %s describe deployment %s` and its pods' events "+
			"(image pulls, GPU scheduling, model download, probes on %s)",
			st.ReadyWorkers, desired, workers.Status.UpdatedReplicas, iec.Namespace, workers.Name, healthPathOf(iec))
		if msg := deploymentFailure(&workers); msg != "" {
			wc.Reason, wc.Message = "WorkersFailing", msg+"; "+wc.Message
		}
	}
	meta.SetStatusCondition(&st.Conditions, wc)

	pods, err := r.listWorkerPods(ctx, iec)
	if err != nil {
		return err
	}
	sc := workersScheduled(pods, iec.Namespace, gen)
	if sc.Status == metav1.ConditionFalse && !meta.IsStatusConditionFalse(st.Conditions, sc.Type) {
		r.Recorder.Eventf(iec, nil, corev1.EventTypeWarning, "WorkersUnschedulable", "Schedule", "%s", sc.Message)
	}
	meta.SetStatusCondition(&st.Conditions, sc)

	rc := metav1.Condition{Type: v1alpha1.ConditionRouterReady, ObservedGeneration: gen}
	if !routingEnabled(iec) {
		rc.Status, rc.Reason, rc.Message = metav1.ConditionTrue, "RoutingDisabled", "intelligentRoutingSpec.enabled is false: the Service "+iec.Name+" sends requests straight to the workers"
	} else {
		var router appsv1.Deployment
		if err := r.Client.Get(ctx, client.ObjectKey{Namespace: iec.Namespace, Name: routerName(iec)}, &router); err != nil {
			return fmt.Errorf("reading the router Deployment: %w", err)
		}
		want := int32Or(iec.Spec.IntelligentRoutingSpec.RouterReplicas, 1)
		if deploymentDone(&router, want) {
			rc.Status, rc.Reason = metav1.ConditionTrue, "RouterAvailable"
			rc.Message = fmt.Sprintf("%d/%d routers ready, strategy %s", router.Status.ReadyReplicas, want, iec.Spec.IntelligentRoutingSpec.RoutingStrategy)
		} else {
			rc.Status, rc.Reason = metav1.ConditionFalse, "RouterNotReady"
			rc.Message = fmt.Sprintf("%d/%d routers ready; a router is ready once it reaches a healthy worker; see `kubectl -n %s logs deployment/%s`",
				router.Status.ReadyReplicas, want, iec.Namespace, router.Name)
		}
	}
	meta.SetStatusCondition(&st.Conditions, rc)

	meta.SetStatusCondition(&st.Conditions, r.cacheCondition(ctx, iec))
	meta.SetStatusCondition(&st.Conditions, conds.monitor)
	setHTTPRouteCondition(iec, conds.httpRoute)
	if conds.autoscaler != nil {
		meta.SetStatusCondition(&st.Conditions, *conds.autoscaler)
	} else {
		meta.RemoveStatusCondition(&st.Conditions, v1alpha1.ConditionAutoscalingReady)
	}
	r.setKVEventsCondition(iec)
	setIgnoredFieldsCondition(iec)
	r.setReplicaConditions(iec)

	ready := metav1.Condition{Type: v1alpha1.ConditionReady, ObservedGeneration: gen, Status: metav1.ConditionTrue, Reason: "EndpointReady"}
	var waiting []string
	for _, t := range []string{v1alpha1.ConditionWorkersReady, v1alpha1.ConditionRouterReady, v1alpha1.ConditionCacheReady} {
		if !meta.IsStatusConditionTrue(st.Conditions, t) {
			waiting = append(waiting, t)
		}
	}
	base, invoke := endpointURL(iec)
	if kc := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionKVEventsUsable); kc != nil && kc.Status == metav1.ConditionFalse {
		// Waiting does not fix this: the spec must change.
		ready.Status, ready.Reason = metav1.ConditionFalse, reasonReadyKVEventsUnusable
		ready.Message = fmt.Sprintf(kvEventsUnusableEventMessage, kc.Message) +
			"; fix the worker settings or choose another intelligentRoutingSpec.routingStrategy (requests are still served, routed without KV events)"
		st.State = v1alpha1.StateFailed
	} else if len(waiting) > 0 {
		ready.Status, ready.Reason = metav1.ConditionFalse, "Waiting"
		ready.Message = "waiting for " + strings.Join(waiting, ", ")
		st.State = v1alpha1.StateProgressing
	} else {
		ready.Message = "send requests to " + invoke
		st.State = v1alpha1.StateComplete
	}
	meta.SetStatusCondition(&st.Conditions, ready)
	st.URL, st.Endpoints = base, []string{invoke}
	st.ObservedGeneration = gen
	return nil
}

// setKVEventsCondition sets KVEventsUsable on a kvaware endpoint (with a
// warning event when it turns False) and removes it from any other.
func (r *Reconciler) setKVEventsCondition(iec *v1alpha1.InferenceEndpointConfig) {
	c, ok := kvEventsCondition(iec, r.Options)
	if !ok {
		meta.RemoveStatusCondition(&iec.Status.Conditions, v1alpha1.ConditionKVEventsUsable)
		return
	}
	if c.Status == metav1.ConditionFalse && !meta.IsStatusConditionFalse(iec.Status.Conditions, c.Type) {
		r.Recorder.Eventf(iec, nil, corev1.EventTypeWarning, reasonReadyKVEventsUnusable, kvEventsUnusableEventAction, kvEventsUnusableEventMessage, c.Message)
	}
	meta.SetStatusCondition(&iec.Status.Conditions, c)
}

func healthPathOf(iec *v1alpha1.InferenceEndpointConfig) string {
	if p := iec.Spec.LoadBalancer.HealthCheckPath; p != "" {
		return p
	}
	return "/health"
}

// deploymentDone reports whether d runs want ready pods of its current
// template.
func deploymentDone(d *appsv1.Deployment, want int32) bool {
	return d.Status.ObservedGeneration >= d.Generation && d.Status.UpdatedReplicas >= want && d.Status.ReadyReplicas >= want
}

// deploymentFailure is the Deployment controller's failure message, if any.
func deploymentFailure(d *appsv1.Deployment) string {
	for _, c := range d.Status.Conditions {
		switch {
		case c.Type == appsv1.DeploymentReplicaFailure && c.Status == corev1.ConditionTrue,
			c.Type == appsv1.DeploymentProgressing && c.Status == corev1.ConditionFalse:
			return c.Message
		}
	}
	return ""
}

// cacheCondition reports the cache wiring. The operator configures the
// workers' LMCache; whether the L2 answers shows in the workers' readiness
// and LMCache metrics, which the operator does not probe.
func (r *Reconciler) cacheCondition(ctx context.Context, iec *v1alpha1.InferenceEndpointConfig) metav1.Condition {
	c := metav1.Condition{Type: v1alpha1.ConditionCacheReady, ObservedGeneration: iec.Generation, Status: metav1.ConditionTrue}
	kv := iec.Spec.KVCacheSpec
	switch backend := l2Backend(iec); {
	case kv.CacheConfigFile != "":
		c.Reason, c.Message = "CacheConfigFile", "LMCache reads kvCacheSpec.cacheConfigFile from ConfigMap "+lmcacheConfigMapName(iec)
	case !cachingEnabled(iec):
		c.Reason, c.Message = "CacheDisabled", "only vLLM's GPU prefix cache is used"
	case backend == "":
		c.Reason, c.Message = "L1Only", fmt.Sprintf("LMCache L1 in CPU RAM (%d GB per worker); no L2", int32Or(kv.L1CacheSizeGB, 5))
	case backend == v1alpha1.L2BackendRedis:
		c.Reason, c.Message = "RedisL2", "LMCache L2 in Redis at "+kv.L2CacheSpec.L2CacheLocalUrl
	case kv.L2CacheSpec.L2CacheLocalUrl != "":
		c.Reason, c.Message = "TieredStorageL2", "LMCache L2 in the cache server at "+kv.L2CacheSpec.L2CacheLocalUrl
	default:
		c.Reason = "TieredStorageL2"
		c.Message = fmt.Sprintf("LMCache L2 in the node-local cache server (host port %d on each worker's node; deployed by the warmpath chart's cacheserver DaemonSet)", r.Options.CacheServerPort)
		if r.Options.CacheServerDaemonSet != "" {
			r.cacheServerReady(ctx, &c)
		}
	}
	return c
}

// cacheServerReady checks the tiered-storage cache server's DaemonSet:
// workers on a node without a ready cache server miss on every L2 lookup.
func (r *Reconciler) cacheServerReady(ctx context.Context, c *metav1.Condition) {
	ns, name, ok := strings.Cut(r.Options.CacheServerDaemonSet, "/")
	if !ok {
		ns, name = "", r.Options.CacheServerDaemonSet
	}
	var ds appsv1.DaemonSet
	err := r.uncached().Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &ds)
	switch {
	case err != nil:
		c.Status, c.Reason = metav1.ConditionFalse, "CacheServerMissing"
		c.Message = fmt.Sprintf("cannot read the cache server DaemonSet %s (%v); install the warmpath chart with its cacheserver, "+
			"or use l2CacheBackend redis", r.Options.CacheServerDaemonSet, err)
	case ds.Status.DesiredNumberScheduled == 0 || ds.Status.NumberReady < ds.Status.DesiredNumberScheduled:
		c.Status, c.Reason = metav1.ConditionFalse, "CacheServerNotReady"
		c.Message = fmt.Sprintf("cache server DaemonSet %s has %d/%d pods ready; see `kubectl -n %s describe daemonset %s`",
			r.Options.CacheServerDaemonSet, ds.Status.NumberReady, ds.Status.DesiredNumberScheduled, ns, name)
	default:
		c.Message += fmt.Sprintf("; %d/%d cache server pods ready", ds.Status.NumberReady, ds.Status.DesiredNumberScheduled)
	}
}

// reasonInvalidWorkerResources is Ready's and WorkersReady's reason while
// the API server refuses the worker Deployment for its container's
// resources.
const reasonInvalidWorkerResources = "InvalidWorkerResources"

// invalidWorkerResourcesError is the API server's refusal of the worker
// Deployment for the vLLM container's resources: requests above limits,
// or an extended resource (nvidia.com/gpu) requested unlike its limit,
// which no pod may ask for. The CRD accepts such resources (the managed
// offering publishes a sample with them), so only the status can say so.
type invalidWorkerResourcesError struct{ err error }

func (e *invalidWorkerResourcesError) Error() string { return e.err.Error() }
func (e *invalidWorkerResourcesError) Unwrap() error { return e.err }

// refusedForResources reports whether err is an Invalid refusal all of
// whose causes lie in a container's resources.
func refusedForResources(err error) bool {
	var st apierrors.APIStatus
	if !errors.As(err, &st) || st.Status().Reason != metav1.StatusReasonInvalid || st.Status().Details == nil {
		return false
	}
	causes := st.Status().Details.Causes
	return len(causes) > 0 && !slices.ContainsFunc(causes, func(c metav1.StatusCause) bool { return !strings.Contains(c.Field, ".resources") })
}

// setInvalidWorkerResources reports that no worker of this generation can
// exist, naming the spec field and the API server's message, with a
// Warning event when it starts. Workers of an earlier generation, if any,
// keep running their template.
func (r *Reconciler) setInvalidWorkerResources(iec *v1alpha1.InferenceEndpointConfig, err *invalidWorkerResourcesError) {
	field := "spec.worker.resources"
	if s := iec.Spec.Worker.Scheduling; s != nil && s.Resources != nil {
		field = "spec.worker.scheduling.resources"
	}
	msg := fmt.Sprintf("the API server refuses the worker Deployment for %s, so no worker of this generation can be created: "+
		"a pod may not request more than its limit, nor an extended resource such as nvidia.com/gpu other than its limit; fix %s. %v",
		field, field, err)
	if c := meta.FindStatusCondition(iec.Status.Conditions, v1alpha1.ConditionReady); c == nil || c.Reason != reasonInvalidWorkerResources {
		r.Recorder.Eventf(iec, nil, corev1.EventTypeWarning, reasonInvalidWorkerResources, "Reconcile", "%s", msg)
	}
	for _, typ := range []string{v1alpha1.ConditionWorkersReady, v1alpha1.ConditionReady} {
		meta.SetStatusCondition(&iec.Status.Conditions, metav1.Condition{
			Type: typ, Status: metav1.ConditionFalse, Reason: reasonInvalidWorkerResources, Message: msg, ObservedGeneration: iec.Generation,
		})
	}
	setIgnoredFieldsCondition(iec)
	iec.Status.State = v1alpha1.StateFailed
	iec.Status.ObservedGeneration = iec.Generation
}

func (r *Reconciler) setFailed(iec *v1alpha1.InferenceEndpointConfig, err error) {
	msg := err.Error()
	if apierrors.IsForbidden(err) {
		msg += "; the operator's ServiceAccount lacks a permission: reinstall the chart's RBAC"
	}
	meta.SetStatusCondition(&iec.Status.Conditions, metav1.Condition{
		Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: "ReconcileError", Message: msg, ObservedGeneration: iec.Generation,
	})
	iec.Status.State = v1alpha1.StateFailed
	r.Recorder.Eventf(iec, nil, corev1.EventTypeWarning, "ReconcileError", "Reconcile", "%s", msg)
}

// writeStatus stores the status if it changed, with an event when the
// state does.
func (r *Reconciler) writeStatus(ctx context.Context, iec *v1alpha1.InferenceEndpointConfig, before *v1alpha1.InferenceEndpointConfigStatus) error {
	if apiequality.Semantic.DeepEqual(before, &iec.Status) {
		return nil
	}
	if before.State != iec.Status.State && iec.Status.State != v1alpha1.StateFailed {
		r.Recorder.Eventf(iec, nil, corev1.EventTypeNormal, iec.Status.State, "Reconcile", "%s", meta.FindStatusCondition(iec.Status.Conditions, v1alpha1.ConditionReady).Message)
	}
	if err := r.Client.Status().Update(ctx, iec); err != nil {
		if apierrors.IsConflict(err) {
			// A newer generation is queued; its reconcile writes status.
			return nil
		}
		return fmt.Errorf("updating status: %w", err)
	}
	return nil
}
