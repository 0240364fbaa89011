package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/warmpath/warmpath/services/operator/api/v1alpha1"
)

// ReasonUnschedulable is WorkersScheduled's reason while a worker pod
// cannot be placed: the scheduler's own reason on the pod's PodScheduled
// condition (corev1.PodReasonUnschedulable), passed through.
const ReasonUnschedulable = corev1.PodReasonUnschedulable

// maxSchedulerMessage bounds the scheduler's message quoted in the
// condition: a metav1.Condition message may hold 32768 bytes, and a status
// update over it would fail the whole reconcile. The scheduler's summary
// ("0/40 nodes are available: ...") fits many times over.
const maxSchedulerMessage = 4096

// unschedulable is the pod's PodScheduled condition when the scheduler
// has given up placing it for now (reason Unschedulable), else nil. Other
// False reasons (SchedulingGated) are a user's or another controller's
// deliberate hold, not a missing node.
func unschedulable(p *corev1.Pod) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		c := &p.Status.Conditions[i]
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return c
		}
	}
	return nil
}

// workersScheduled is the WorkersScheduled condition for the worker pods:
// False with reason Unschedulable and the scheduler's message while any
// pod (not being deleted) cannot be placed, True otherwise. When several
// pods are stuck, the first by name is quoted: replicas of one template
// are refused for the same reasons.
func workersScheduled(pods []corev1.Pod, namespace string, gen int64) metav1.Condition {
	c := metav1.Condition{Type: v1alpha1.ConditionWorkersScheduled, ObservedGeneration: gen}
	var live int
	var stuck []*corev1.Pod
	for i := range pods {
		p := &pods[i]
		if p.DeletionTimestamp != nil {
			continue
		}
		live++
		if unschedulable(p) != nil {
			stuck = append(stuck, p)
		}
	}
	if len(stuck) == 0 {
		c.Status, c.Reason = metav1.ConditionTrue, "Scheduled"
		c.Message = fmt.Sprintf("the scheduler reports none of the %d worker pods unschedulable", live)
		return c
	}
	slices.SortFunc(stuck, func(a, b *corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	first := stuck[0]
	c.Status, c.Reason = metav1.ConditionFalse, ReasonUnschedulable
	c.Message = fmt.Sprintf("%d/%d worker pods cannot be scheduled: %s (pod %s; see `kubectl -n %s describe pod %s`, "+
		"and the endpoint's instanceType and worker.scheduling)",
		len(stuck), live, truncateUTF8(unschedulable(first).Message, maxSchedulerMessage), first.Name, namespace, first.Name)
	return c
}

// truncateUTF8 cuts s to at most n bytes without splitting a character.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// listWorkerPods reads the endpoint's worker pods (of every revision: a
// pod of a rollout's new template that cannot be placed counts) from the
// manager's cache, which holds only the operator's worker pods.
func (r *Reconciler) listWorkerPods(ctx context.Context, iec *v1alpha1.InferenceEndpointConfig) ([]corev1.Pod, error) {
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, client.InNamespace(iec.Namespace), client.MatchingLabels(selectorLabels(iec, componentWorker))); err != nil {
		return nil, fmt.Errorf("listing the worker pods: %w", err)
	}
	return pods.Items, nil
}

// endpointOfPod maps a worker pod to its endpoint by the label the
// operator puts on every worker pod. Pods belong to the Deployment's
// ReplicaSets, not to the endpoint, so no ownerReference leads there.
func endpointOfPod(_ context.Context, obj client.Object) []reconcile.Request {
	name := obj.GetLabels()[EndpointLabel]
	if name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace(), Name: name}}}
}

// schedulingState is what of a pod's scheduling the endpoint's status
// shows: the scheduler's refusal, or "" when there is none.
func schedulingState(obj client.Object) string {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return ""
	}
	if c := unschedulable(p); c != nil {
		return c.Reason + ": " + c.Message
	}
	return ""
}

// schedulingChanged lets through only the pod events that can change
// WorkersScheduled: a pod that is (or was, before its deletion)
// unschedulable, and any change of that. Readiness and other status
// updates are left to the Deployment's own status, which the reconciler
// already watches, so a busy fleet does not re-apply every child on each
// probe flip.
func schedulingChanged() predicate.Predicate {
	return predicate.Funcs{
		CreateFunc: func(e event.CreateEvent) bool { return schedulingState(e.Object) != "" },
		UpdateFunc: func(e event.UpdateEvent) bool { return schedulingState(e.ObjectOld) != schedulingState(e.ObjectNew) },
		DeleteFunc: func(e event.DeleteEvent) bool {
			// The last state seen may be stale (DeleteStateUnknown):
			// reconcile then, to be sure the condition clears.
			return e.DeleteStateUnknown || schedulingState(e.Object) != ""
		},
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}
