package controller_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/warmpath/warmpath/services/operator/api/v1alpha1"
	"github.com/warmpath/warmpath/services/operator/internal/controller"
)

// TestKVEventsRefusal: a kvaware endpoint on an LMCache release that
// publishes no KV events is refused — KVEventsUsable False with the
// reason, a Warning event, Ready False and the state DeploymentFailed
// however ready its pods are — while its workers and router are still
// rolled out (requests are served, routed without events). A newer image
// lines the events up and the endpoint turns Ready; another strategy
// drops the condition.
func TestKVEventsRefusal(t *testing.T) {
	c := cluster(t)
	ns := namespace(t, c)
	iec := minimal(ns, "kv")
	iec.Spec.Worker.Image = "lmcache/vllm-openai:v0.3.9"
	iec.Spec.IntelligentRoutingSpec = v1alpha1.IntelligentRoutingSpec{Enabled: ptr.To(true), RoutingStrategy: v1alpha1.StrategyKVAware}
	if err := c.Create(context.Background(), iec); err != nil {
		t.Fatal(err)
	}
	get(t, c, ns, "kv-worker", &appsv1.Deployment{})
	get(t, c, ns, "kv-router", &appsv1.Deployment{})
	setReady(t, c, ns, "kv-worker", 1)
	setReady(t, c, ns, "kv-router", 1)

	status := func(what string, check func(st v1alpha1.InferenceEndpointConfigStatus) error) {
		t.Helper()
		eventually(t, what, func() error {
			var cur v1alpha1.InferenceEndpointConfig
			if err := c.Get(context.Background(), client.ObjectKeyFromObject(iec), &cur); err != nil {
				return err
			}
			return check(cur.Status)
		})
	}
	want := func(typ string, s metav1.ConditionStatus, reason, msg string) func(v1alpha1.InferenceEndpointConfigStatus) error {
		return func(st v1alpha1.InferenceEndpointConfigStatus) error {
			cond := meta.FindStatusCondition(st.Conditions, typ)
			if cond == nil || cond.Status != s || cond.Reason != reason || !strings.Contains(cond.Message, msg) {
				return fmt.Errorf("%s %+v, want %s/%s with %q (state %s)", typ, cond, s, reason, msg, st.State)
			}
			return nil
		}
	}

	status("KVEventsUsable False", want(v1alpha1.ConditionKVEventsUsable, metav1.ConditionFalse, controller.ReasonLMCacheTooOld, "LMCache 0.3.9, older than 0.4.3"))
	status("Ready False, DeploymentFailed", func(st v1alpha1.InferenceEndpointConfigStatus) error {
		if err := want(v1alpha1.ConditionReady, metav1.ConditionFalse, "KVEventsUnusable", "older than 0.4.3")(st); err != nil {
			return err
		}
		if !meta.IsStatusConditionTrue(st.Conditions, v1alpha1.ConditionWorkersReady) || !meta.IsStatusConditionTrue(st.Conditions, v1alpha1.ConditionRouterReady) {
			return fmt.Errorf("workers and router not ready yet: %+v", st.Conditions)
		}
		if st.State != v1alpha1.StateFailed {
			return fmt.Errorf("state %s, want %s", st.State, v1alpha1.StateFailed)
		}
		return nil
	})
	eventually(t, "KVEventsUnusable event", func() error { return findEvent(c, ns, "kv", "KVEventsUnusable") })

	update := func(what string, edit func(*v1alpha1.InferenceEndpointConfig)) {
		t.Helper()
		eventually(t, what, func() error {
			var cur v1alpha1.InferenceEndpointConfig
			if err := c.Get(context.Background(), client.ObjectKeyFromObject(iec), &cur); err != nil {
				return err
			}
			edit(&cur)
			return c.Update(context.Background(), &cur)
		})
	}
	// An image change rolls the workers: ready again at the new template.
	rolled := func(image string) {
		t.Helper()
		eventually(t, "workers on "+image, func() error {
			var d appsv1.Deployment
			if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "kv-worker"}, &d); err != nil {
				return err
			}
			if got := d.Spec.Template.Spec.Containers[0].Image; got != image {
				return fmt.Errorf("image %s", got)
			}
			return nil
		})
		setReady(t, c, ns, "kv-worker", 1)
	}
	update("a newer image", func(e *v1alpha1.InferenceEndpointConfig) { e.Spec.Worker.Image = "lmcache/vllm-openai:v0.5.5" })
	rolled("lmcache/vllm-openai:v0.5.5")
	status("KVEventsUsable True", want(v1alpha1.ConditionKVEventsUsable, metav1.ConditionTrue, controller.ReasonEventsLineUp, "hash sha256_cbor on both"))
	status("Ready True", want(v1alpha1.ConditionReady, metav1.ConditionTrue, "EndpointReady", ""))

	update("an image whose release the tag does not tell", func(e *v1alpha1.InferenceEndpointConfig) { e.Spec.Worker.Image = "lmcache/vllm-openai:latest" })
	rolled("lmcache/vllm-openai:latest")
	status("KVEventsUsable Unknown", want(v1alpha1.ConditionKVEventsUsable, metav1.ConditionUnknown, controller.ReasonUnknownWorkerImage, "lmcache/vllm-openai:latest"))
	status("Ready True despite Unknown", want(v1alpha1.ConditionReady, metav1.ConditionTrue, "EndpointReady", ""))

	update("prefixaware", func(e *v1alpha1.InferenceEndpointConfig) {
		e.Spec.IntelligentRoutingSpec.RoutingStrategy = v1alpha1.StrategyPrefixAware
	})
	status("no KVEventsUsable", func(st v1alpha1.InferenceEndpointConfigStatus) error {
		if cond := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionKVEventsUsable); cond != nil {
			return fmt.Errorf("KVEventsUsable still set: %+v", cond)
		}
		return nil
	})
}
