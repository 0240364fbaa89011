package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// testHelmLifecycle: `helm upgrade` with changed values rolls the change out
// and the endpoint still answers; `helm test` passes; `helm uninstall`
// leaves nothing of the release behind but what docs/operator.md says it
// keeps (the CRD, which Helm never deletes from crds/).
func testHelmLifecycle(ctx context.Context, t *testing.T, e *env) {
	chart := filepath.Join(e.root, "charts", "warmpath")
	// The node still carries the GPU pool's taint (testScheduling): the
	// upgrade gives the chart's own pods the toleration, and the cache
	// server's new pod must use it to land.
	tolerate := []any{map[string]any{"key": poolTaint, "operator": "Exists", "effect": "NoSchedule"}}
	values := writeValues(t, map[string]any{
		"tests":       map[string]any{"image": "warmpath.local/curl:e2e", "tolerations": tolerate},
		"cacheserver": map[string]any{"memoryCapacity": "192Mi", "tolerations": tolerate},
		"operator":    map[string]any{"tolerations": tolerate},
	})
	e.c.mustCLI(ctx, t, "helm", "upgrade", release, chart, "--namespace", ns,
		"-f", filepath.Join(chart, "values-sim.yaml"), "-f", values, "--wait", "--timeout", "5m")
	eventually(ctx, t, 3*time.Minute, "the cache server rolled out with 192Mi", func() error {
		pods := e.c.waitPodsReady(ctx, t, ns, cacheSel, 1, 3*time.Minute)
		for _, c := range pods[0].Spec.Containers {
			if strings.Contains(strings.Join(c.Args, " "), fmt.Sprint(192<<20)) {
				return nil
			}
		}
		return fmt.Errorf("cache server pod %s runs %v", pods[0].Name, pods[0].Spec.Containers[0].Args)
	})
	c := e.c.waitPodsReady(ctx, t, ns, "", -1, 3*time.Minute)
	t.Logf("after the upgrade %d pods are Ready", len(c))
	if _, err := complete(ctx, newClient(e.router), "After the upgrade", false); err != nil {
		t.Errorf("completion after the upgrade: %v", err)
	}
	out := e.c.mustCLI(ctx, t, "helm", "test", release, "--namespace", ns, "--timeout", "3m")
	if !strings.Contains(out, "Phase:          Succeeded") {
		t.Errorf("helm test did not succeed:\n%s", out)
	}

	e.c.mustCLI(ctx, t, "helm", "uninstall", release, "--namespace", ns, "--wait", "--timeout", "5m")
	eventually(ctx, t, 2*time.Minute, "nothing of the release left", func() error {
		return leftovers(ctx, e)
	})
	if _, err := e.c.cs.Discovery().ServerResourcesForGroupVersion("inference.warmpath.io/v1alpha1"); err != nil {
		t.Errorf("the CRD is gone after uninstall, but the chart documents that it is kept: %v", err)
	}
}

// leftovers lists what of warmpath is still in the cluster: any object of
// the kinds the chart and the operator create, in the release's namespace
// (but what every namespace has), and the cluster-wide RBAC named for it.
func leftovers(ctx context.Context, e *env) error {
	gvr := func(g, v, r string) schema.GroupVersionResource {
		return schema.GroupVersionResource{Group: g, Version: v, Resource: r}
	}
	namespaced := []schema.GroupVersionResource{
		gvr("", "v1", "pods"), gvr("apps", "v1", "deployments"), gvr("apps", "v1", "daemonsets"),
		gvr("apps", "v1", "statefulsets"), gvr("", "v1", "services"), gvr("", "v1", "configmaps"),
		gvr("", "v1", "secrets"), gvr("", "v1", "serviceaccounts"), gvr("", "v1", "persistentvolumeclaims"),
		gvr("rbac.authorization.k8s.io", "v1", "roles"), gvr("rbac.authorization.k8s.io", "v1", "rolebindings"),
		gvr("networking.k8s.io", "v1", "networkpolicies"), gvr("policy", "v1", "poddisruptionbudgets"), iecGVR,
	}
	everyNamespaceHas := map[string]bool{"configmaps/kube-root-ca.crt": true, "serviceaccounts/default": true}
	var left []string
	for _, r := range namespaced {
		l, err := e.c.dyn.Resource(r).Namespace(ns).List(ctx, metav1.ListOptions{})
		if apierrors.IsNotFound(err) {
			continue // a kind the cluster does not serve
		}
		if err != nil {
			return fmt.Errorf("list %s: %w", r.Resource, err)
		}
		for _, x := range l.Items {
			if n := r.Resource + "/" + x.GetName(); !everyNamespaceHas[n] {
				left = append(left, n)
			}
		}
	}
	for _, r := range []schema.GroupVersionResource{gvr("rbac.authorization.k8s.io", "v1", "clusterroles"), gvr("rbac.authorization.k8s.io", "v1", "clusterrolebindings")} {
		l, err := e.c.dyn.Resource(r).List(ctx, metav1.ListOptions{})
		if err != nil {
			return fmt.Errorf("list %s: %w", r.Resource, err)
		}
		for _, x := range l.Items {
			if strings.Contains(x.GetName(), "warmpath") {
				left = append(left, r.Resource+"/"+x.GetName())
			}
		}
	}
	if len(left) > 0 {
		return fmt.Errorf("left behind: %s", strings.Join(left, ", "))
	}
	return nil
}
