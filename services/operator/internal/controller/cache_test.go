package controller_test

import (
	"context"
	"fmt"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/warmpath/warmpath/services/operator/api/v1alpha1"
)

// TestCacheServerReadiness: a tieredstorage endpoint's CacheReady follows
// the cache server DaemonSet named by the operator's flag.
func TestCacheServerReadiness(t *testing.T) {
	c := cluster(t)
	ns := namespace(t, c)
	iec := minimal(ns, "ts")
	iec.Spec.KVCacheSpec.EnableL2Cache = ptr.To(true)
	iec.Spec.KVCacheSpec.L2CacheSpec = &v1alpha1.L2CacheSpec{L2CacheBackend: v1alpha1.L2BackendTieredStorage}
	if err := c.Create(context.Background(), iec); err != nil {
		t.Fatal(err)
	}
	cacheCond := func(reason string, status metav1.ConditionStatus) {
		t.Helper()
		eventually(t, "CacheReady "+reason, func() error {
			var cur v1alpha1.InferenceEndpointConfig
			if err := c.Get(context.Background(), client.ObjectKeyFromObject(iec), &cur); err != nil {
				return err
			}
			cond := meta.FindStatusCondition(cur.Status.Conditions, v1alpha1.ConditionCacheReady)
			if cond == nil || cond.Reason != reason || cond.Status != status {
				return fmt.Errorf("CacheReady %+v", cond)
			}
			return nil
		})
	}
	// A metadata change triggers a reconcile at once (the operator would
	// otherwise look again within 30 s).
	poke := func(v string) {
		t.Helper()
		eventually(t, "annotating", func() error {
			var cur v1alpha1.InferenceEndpointConfig
			if err := c.Get(context.Background(), client.ObjectKeyFromObject(iec), &cur); err != nil {
				return err
			}
			cur.Annotations = map[string]string{"test/poke": v}
			return c.Update(context.Background(), &cur)
		})
	}
	cacheCond("CacheServerMissing", metav1.ConditionFalse)

	if err := c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "cache"}}); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app": "cacheserver"}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "cache", Name: "cacheserver"},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "warmpath/cacheserver:test"}}},
			},
		},
	}
	if err := c.Create(context.Background(), ds); err != nil {
		t.Fatal(err)
	}
	setDS := func(ready, desired int32) {
		t.Helper()
		ds.Status = appsv1.DaemonSetStatus{DesiredNumberScheduled: desired, CurrentNumberScheduled: desired, NumberReady: ready, ObservedGeneration: ds.Generation}
		if err := c.Status().Update(context.Background(), ds); err != nil {
			t.Fatal(err)
		}
	}
	setDS(1, 2)
	poke("1")
	cacheCond("CacheServerNotReady", metav1.ConditionFalse)
	setDS(2, 2)
	poke("2")
	cacheCond("TieredStorageL2", metav1.ConditionTrue)
}
