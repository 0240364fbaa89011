package controller_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/warmpath/warmpath/services/operator/api/v1alpha1"
)

// TestUnschedulableWorkersReported: a worker pod the scheduler cannot
// place turns WorkersScheduled False with the scheduler's reason and
// message, and a Warning event; once placed, the condition turns True.
// envtest runs no scheduler (nor Deployment controller): the test creates
// a pod as the ReplicaSet would, with the worker template's labels, and
// writes its PodScheduled condition as the scheduler would.
func TestUnschedulableWorkersReported(t *testing.T) {
	c := cluster(t)
	ns := namespace(t, c)
	iec := minimal(ns, "u")
	iec.Spec.InstanceType = "ml.p5.48xlarge"
	if err := c.Create(context.Background(), iec); err != nil {
		t.Fatal(err)
	}
	var d appsv1.Deployment
	get(t, c, ns, "u-worker", &d)
	// The ServiceAccount admission plugin wants the pod's ServiceAccount to
	// exist; no controller creates "default" in envtest.
	if err := c.Create(context.Background(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "default"}}); err != nil {
		t.Fatal(err)
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "u-worker-7d9f-abcde", Labels: d.Spec.Template.Labels},
		Spec:       *d.Spec.Template.Spec.DeepCopy(),
	}
	if err := c.Create(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	const msg = "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
	setScheduled := func(status corev1.ConditionStatus, reason, message string) {
		t.Helper()
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: status, Reason: reason, Message: message, LastTransitionTime: metav1.Now()}}
		if err := c.Status().Update(context.Background(), p); err != nil {
			t.Fatal(err)
		}
	}
	condition := func(status metav1.ConditionStatus, reason, message string) {
		t.Helper()
		eventually(t, fmt.Sprintf("WorkersScheduled %s/%s", status, reason), func() error {
			var cur v1alpha1.InferenceEndpointConfig
			if err := c.Get(context.Background(), client.ObjectKeyFromObject(iec), &cur); err != nil {
				return err
			}
			cond := meta.FindStatusCondition(cur.Status.Conditions, v1alpha1.ConditionWorkersScheduled)
			if cond == nil || cond.Status != status || cond.Reason != reason || !strings.Contains(cond.Message, message) {
				return fmt.Errorf("WorkersScheduled %+v", cond)
			}
			return nil
		})
	}
	condition(metav1.ConditionTrue, "Scheduled", "")

	setScheduled(corev1.ConditionFalse, corev1.PodReasonUnschedulable, msg)
	condition(metav1.ConditionFalse, "Unschedulable", "1/1 worker pods cannot be scheduled: "+msg)
	eventually(t, "WorkersUnschedulable event", func() error { return findEvent(c, ns, "u", "WorkersUnschedulable") })

	setScheduled(corev1.ConditionTrue, "", "")
	condition(metav1.ConditionTrue, "Scheduled", "none of the 1 worker pods")

	// Unschedulable again, then deleted (a scale-down, or a rollout
	// replacing it): the condition clears.
	setScheduled(corev1.ConditionFalse, corev1.PodReasonUnschedulable, msg)
	condition(metav1.ConditionFalse, "Unschedulable", msg)
	if err := c.Delete(context.Background(), p, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	condition(metav1.ConditionTrue, "Scheduled", "none of the 0 worker pods")
}
