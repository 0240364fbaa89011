package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

// The taint and label a GPU pool would carry, put on the e2e node.
const (
	poolLabel = "warmpath.io/e2e-pool"
	poolTaint = "warmpath.io/e2e-gpu"
)

// testScheduling: with the node tainted and labelled as a GPU pool is,
// workers given the matching toleration and nodeSelector in
// spec.worker.scheduling run there; a nodeSelector no node matches leaves
// a worker Pending, and the endpoint's WorkersScheduled condition says why
// in the scheduler's words; putting it right clears the condition. The
// taint stays for the next step (helm upgrade with the chart's tolerations);
// TestE2E removes it at the end (untaintPool).
func testScheduling(ctx context.Context, t *testing.T, e *env) {
	node := e.node(ctx, t)
	e.c.patchNode(ctx, t, node, fmt.Sprintf(`{"metadata":{"labels":{%q:"gpu"}},"spec":{"taints":[{"key":%q,"value":"true","effect":"NoSchedule"}]}}`, poolLabel, poolTaint))

	placed := func(selector string) string {
		return fmt.Sprintf(`{"spec":{"worker":{"scheduling":{"nodeSelector":{%q:%q},"tolerations":[{"key":%q,"operator":"Exists","effect":"NoSchedule"}]}}}}`,
			poolLabel, selector, poolTaint)
	}
	e.c.patchEndpoint(ctx, t, placed("gpu"))
	var pods []corev1.Pod
	eventually(ctx, t, 3*time.Minute, "workers rolled onto the tainted pool", func() error {
		pods = e.c.waitPodsReady(ctx, t, ns, workerSel, 2, 3*time.Minute)
		for _, p := range pods {
			if p.Spec.NodeSelector[poolLabel] != "gpu" || !tolerates(p.Spec.Tolerations, poolTaint) {
				return fmt.Errorf("worker %s: nodeSelector %v, tolerations %v", p.Name, p.Spec.NodeSelector, p.Spec.Tolerations)
			}
		}
		return nil
	})
	t.Logf("workers %s and %s run on the tainted node %s", pods[0].Name, pods[1].Name, node)

	e.c.patchEndpoint(ctx, t, placed("no-such-pool"))
	eventually(ctx, t, 2*time.Minute, "WorkersScheduled=False with the scheduler's reason", func() error {
		c, err := e.c.endpointCondition(ctx, "WorkersScheduled")
		if err != nil {
			return err
		}
		if c["status"] != "False" || c["reason"] != "Unschedulable" || !strings.Contains(fmt.Sprint(c["message"]), "node affinity/selector") {
			return fmt.Errorf("condition %v", c)
		}
		t.Logf("WorkersScheduled: %s: %s", c["reason"], c["message"])
		return nil
	})
	e.c.patchEndpoint(ctx, t, placed("gpu"))
	eventually(ctx, t, 3*time.Minute, "WorkersScheduled=True again", func() error {
		c, err := e.c.endpointCondition(ctx, "WorkersScheduled")
		if err != nil {
			return err
		}
		if c["status"] != "True" {
			return fmt.Errorf("condition %v", c)
		}
		return nil
	})
	e.waitRoutersSee(ctx, t, e.workerURLs(ctx, t, 2), 3*time.Minute)
}

// untaintPool takes testScheduling's label and taint off the node.
func (e *env) untaintPool(t *testing.T) {
	ctx := context.Background()
	e.c.patchNode(ctx, t, e.node(ctx, t), fmt.Sprintf(`{"metadata":{"labels":{%q:null}},"spec":{"taints":null}}`, poolLabel))
}

func tolerates(ts []corev1.Toleration, key string) bool {
	for _, t := range ts {
		if t.Key == key {
			return true
		}
	}
	return false
}

// node is the cluster's one node.
func (e *env) node(ctx context.Context, t *testing.T) string {
	t.Helper()
	nodes, err := e.c.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil || len(nodes.Items) != 1 {
		t.Fatalf("want one node: %v (%d)", err, len(nodes.Items))
	}
	return nodes.Items[0].Name
}

func (c *cluster) patchNode(ctx context.Context, t *testing.T, node, patch string) {
	t.Helper()
	if _, err := c.cs.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Errorf("patch node %s with %s: %v", node, patch, err)
		return
	}
	t.Logf("patched node %s: %s", node, patch)
}

// endpointCondition is one status condition of the endpoint, as the
// operator wrote it.
func (c *cluster) endpointCondition(ctx context.Context, typ string) (map[string]any, error) {
	u, err := c.dyn.Resource(iecGVR).Namespace(ns).Get(ctx, endpoint, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	conds, _, err := unstructured.NestedSlice(u.Object, "status", "conditions")
	if err != nil {
		return nil, err
	}
	for _, x := range conds {
		if m, ok := x.(map[string]any); ok && m["type"] == typ {
			return m, nil
		}
	}
	return nil, fmt.Errorf("no %s condition in %v", typ, conds)
}
