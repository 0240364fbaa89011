package controller

import (
	"strings"
	"testing"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	v1alpha1 "github.com/warmpath/warmpath/services/operator/api/v1alpha1"
)

const gpuMessage = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu. preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod."

// pod is a worker pod with the given PodScheduled condition (none when
// status is "").
func pod(name string, status corev1.ConditionStatus, reason, message string) corev1.Pod {
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}}
	if status != "" {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: status, Reason: reason, Message: message}}
	}
	return p
}

func TestWorkersScheduled(t *testing.T) {
	deleting := pod("w-0", corev1.ConditionFalse, corev1.PodReasonUnschedulable, gpuMessage)
	deleting.DeletionTimestamp = &metav1.Time{}
	tests := []struct {
		name    string
		pods    []corev1.Pod
		status  metav1.ConditionStatus
		reason  string
		message []string // substrings the message must hold
	}{
		{"no pods", nil, metav1.ConditionTrue, "Scheduled", []string{"none of the 0 worker pods"}},
		{"scheduled and just created", []corev1.Pod{pod("w-0", corev1.ConditionTrue, "", ""), pod("w-1", "", "", "")},
			metav1.ConditionTrue, "Scheduled", []string{"none of the 2 worker pods"}},
		{"one unschedulable", []corev1.Pod{pod("w-0", corev1.ConditionTrue, "", ""), pod("w-1", corev1.ConditionFalse, corev1.PodReasonUnschedulable, gpuMessage)},
			metav1.ConditionFalse, ReasonUnschedulable, []string{"1/2 worker pods cannot be scheduled: " + gpuMessage, "pod w-1", "kubectl -n ns describe pod w-1"}},
		{"first by name is quoted", []corev1.Pod{pod("w-b", corev1.ConditionFalse, corev1.PodReasonUnschedulable, "b's"), pod("w-a", corev1.ConditionFalse, corev1.PodReasonUnschedulable, "a's")},
			metav1.ConditionFalse, ReasonUnschedulable, []string{"2/2 worker pods cannot be scheduled: a's (pod w-a;"}},
		// A scheduling gate is a deliberate hold, not a missing node.
		{"gated", []corev1.Pod{pod("w-0", corev1.ConditionFalse, corev1.PodReasonSchedulingGated, "waiting for a gate")},
			metav1.ConditionTrue, "Scheduled", nil},
		{"being deleted", []corev1.Pod{deleting}, metav1.ConditionTrue, "Scheduled", []string{"none of the 0 worker pods"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := workersScheduled(tt.pods, "ns", 7)
			if c.Type != v1alpha1.ConditionWorkersScheduled || c.Status != tt.status || c.Reason != tt.reason || c.ObservedGeneration != 7 {
				t.Fatalf("got %s=%s reason %s (generation %d), want %s reason %s (7)", c.Type, c.Status, c.Reason, c.ObservedGeneration, tt.status, tt.reason)
			}
			for _, want := range tt.message {
				if !strings.Contains(c.Message, want) {
					t.Errorf("message %q lacks %q", c.Message, want)
				}
			}
		})
	}
}

// TestWorkersScheduledBoundsMessage: a scheduler message of any length
// leaves the condition within what the API server stores (32768 bytes),
// cut on a character boundary.
func TestWorkersScheduledBoundsMessage(t *testing.T) {
	long := strings.Repeat("é", 40000)
	c := workersScheduled([]corev1.Pod{pod("w-0", corev1.ConditionFalse, corev1.PodReasonUnschedulable, long)}, "ns", 1)
	if len(c.Message) > 32768 || !utf8.ValidString(c.Message) {
		t.Errorf("message of %d bytes (valid UTF-8: %v)", len(c.Message), utf8.ValidString(c.Message))
	}
}

// TestSchedulingChanged: only pod events that can change WorkersScheduled
// reach the reconciler.
func TestSchedulingChanged(t *testing.T) {
	stuck := pod("w-0", corev1.ConditionFalse, corev1.PodReasonUnschedulable, gpuMessage)
	stuckElse := pod("w-0", corev1.ConditionFalse, corev1.PodReasonUnschedulable, "0/4 nodes are available")
	placed := pod("w-0", corev1.ConditionTrue, "", "")
	fresh := pod("w-0", "", "", "")
	ready := placed.DeepCopy()
	ready.Status.Conditions = append(ready.Status.Conditions, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue})
	p := schedulingChanged()
	tests := []struct {
		name string
		got  bool
		want bool
	}{
		{"create, not yet scheduled", p.Create(event.CreateEvent{Object: &fresh}), false},
		{"create, unschedulable", p.Create(event.CreateEvent{Object: &stuck}), true},
		{"update, becomes unschedulable", p.Update(event.UpdateEvent{ObjectOld: &fresh, ObjectNew: &stuck}), true},
		{"update, scheduler's message changes", p.Update(event.UpdateEvent{ObjectOld: &stuck, ObjectNew: &stuckElse}), true},
		{"update, gets placed", p.Update(event.UpdateEvent{ObjectOld: &stuck, ObjectNew: &placed}), true},
		{"update, readiness only", p.Update(event.UpdateEvent{ObjectOld: &placed, ObjectNew: ready}), false},
		{"delete, was unschedulable", p.Delete(event.DeleteEvent{Object: &stuck}), true},
		{"delete, was placed", p.Delete(event.DeleteEvent{Object: &placed}), false},
		{"delete, last state unknown", p.Delete(event.DeleteEvent{Object: &placed, DeleteStateUnknown: true}), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("got %v, want %v", tt.got, tt.want)
			}
		})
	}
}
