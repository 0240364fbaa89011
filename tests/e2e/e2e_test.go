package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/warmpath/warmpath/tests/harness"
)

const (
	release  = "warmpath"
	ns       = "warmpath"
	endpoint = "sim-llama" // the simulator profile's endpoint (values-sim.yaml)
	// Selectors of the pods the operator creates for the endpoint.
	workerSel = "inference.warmpath.io/endpoint=" + endpoint + ",app.kubernetes.io/component=worker"
	routerSel = "inference.warmpath.io/endpoint=" + endpoint + ",app.kubernetes.io/component=router"
	cacheSel  = "app.kubernetes.io/component=cacheserver"
)

// TestE2E installs the chart as the README tells a user to, then runs each
// check against the installed release in order: each needs the ones before
// (an uninstalled release cannot take traffic), so they share one install.
func TestE2E(t *testing.T) {
	c := newCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	root := repoRoot(t)
	t.Cleanup(func() {
		if t.Failed() {
			c.diagnose(t, ns)
		}
	})

	values := writeValues(t, map[string]any{
		// No registry here: `helm test` runs the node's curl stand-in.
		"tests": map[string]any{"image": "warmpath.local/curl:e2e"},
		// The model-fetch init container's image, as make images built it.
		"images": map[string]any{"modelFetch": map[string]any{"tag": "dev"}},
	})
	c.mustCLI(ctx, t, "helm", "install", release, filepath.Join(root, "charts", "warmpath"),
		"--namespace", ns, "--create-namespace",
		"-f", filepath.Join(root, "charts", "warmpath", "values-sim.yaml"), "-f", values,
		"--wait", "--timeout", "5m")
	c.waitPodsReady(ctx, t, ns, workerSel, 2, 4*time.Minute)
	c.waitPodsReady(ctx, t, ns, routerSel, -1, 3*time.Minute)
	c.waitPodsReady(ctx, t, ns, "", -1, 3*time.Minute)
	e := &env{c: c, root: root, router: c.serviceURL(ctx, t, ns, endpoint)}
	// kube-proxy programs a Service's endpoints a moment after its pods turn
	// ready; until then the ClusterIP refuses connections.
	eventually(ctx, t, time.Minute, "the router Service answers /ready", func() error {
		_, err := harness.GetBody(ctx, e.router+"/ready")
		return err
	})
	// Prometheus watches from the start, so the dashboards' step sees the
	// whole run.
	e.prom = startPrometheus(ctx, t, c.kubeconfig)
	t.Cleanup(func() { e.untaintPool(t) })
	t.Logf("router Service: %s", e.router)

	steps := []struct {
		name string
		run  func(context.Context, *testing.T, *env)
	}{
		{"Traffic", testTraffic},
		{"StrategySwitch", testStrategySwitch},
		{"Scale", testScale},
		{"WorkerLoss", testWorkerLoss},
		{"Rollouts", testRollouts},
		{"RouterReplicas", testRouterReplicas},
		{"L2Sharing", testL2Sharing},
		{"RouterTLSAndKeys", testRouterTLSAndKeys},
		{"Dashboards", testDashboards},
		{"Autoscaling", testAutoscaling},
		// Before Scheduling, whose taint stays on the node for the helm
		// upgrade after it: this step's endpoint does not tolerate it.
		{"ModelFromS3", testModelFromS3},
		{"Scheduling", testScheduling},
		{"HelmTestUpgradeUninstall", testHelmLifecycle},
	}
	for _, s := range steps {
		if !t.Run(s.name, func(t *testing.T) { s.run(ctx, t, e) }) {
			t.Fatalf("%s failed; the later steps need it", s.name)
		}
	}
}

// env is what every step shares.
type env struct {
	c      *cluster
	root   string
	router string // the router's Service, http://ClusterIP:port
	prom   string // Prometheus scraping the cluster
}

func writeValues(t *testing.T, v map[string]any) string {
	t.Helper()
	b, err := json.Marshal(v) // JSON is YAML
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "values-e2e.yaml")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// serviceURL is http://ClusterIP:port of a Service's first port: the host
// reaches it through kube-proxy's rules, as a pod would.
func (c *cluster) serviceURL(ctx context.Context, t *testing.T, namespace, name string) string {
	t.Helper()
	svc, err := c.cs.CoreV1().Services(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("Service %s/%s: %v", namespace, name, err)
	}
	if svc.Spec.ClusterIP == "" || len(svc.Spec.Ports) == 0 {
		t.Fatalf("Service %s/%s has no ClusterIP or port", namespace, name)
	}
	return fmt.Sprintf("http://%s:%d", svc.Spec.ClusterIP, svc.Spec.Ports[0].Port)
}

// podURLs are http://podIP:port of each pod.
func podURLs(pods []corev1.Pod, port int) []string {
	out := make([]string, 0, len(pods))
	for _, p := range pods {
		out = append(out, fmt.Sprintf("http://%s:%d", p.Status.PodIP, port))
	}
	return out
}

func (c *cluster) patchEndpoint(ctx context.Context, t *testing.T, patch string) {
	t.Helper()
	if _, err := c.dyn.Resource(iecGVR).Namespace(ns).Patch(ctx, endpoint, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatalf("patch InferenceEndpointConfig %s with %s: %v", endpoint, patch, err)
	}
	t.Logf("patched InferenceEndpointConfig %s: %s", endpoint, patch)
}

// eventually polls cond every half second until it returns nil or timeout
// passes, then fails with cond's last error.
func eventually(ctx context.Context, t *testing.T, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("%s: not within %s: %v", what, timeout, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// routerView is what one router pod reports of itself.
type routerView struct {
	strategy string
	workers  []string // healthy worker URLs
}

func routerState(ctx context.Context, base string) (routerView, error) {
	var v routerView
	b, err := harness.GetBody(ctx, base+"/debug/config")
	if err != nil {
		return v, err
	}
	var cfg struct {
		Strategy string `json:"strategy"`
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		return v, fmt.Errorf("/debug/config: %w", err)
	}
	v.strategy = cfg.Strategy
	if b, err = harness.GetBody(ctx, base+"/debug/endpoints"); err != nil {
		return v, err
	}
	var eps struct {
		Endpoints []struct {
			URL     string `json:"url"`
			Healthy bool   `json:"healthy"`
		} `json:"endpoints"`
	}
	if err := json.Unmarshal(b, &eps); err != nil {
		return v, fmt.Errorf("/debug/endpoints: %w", err)
	}
	for _, e := range eps.Endpoints {
		if e.Healthy {
			v.workers = append(v.workers, e.URL)
		}
	}
	slices.Sort(v.workers)
	return v, nil
}

// routerPods are the endpoint's Ready router pods and their URLs.
func (e *env) routerPods(ctx context.Context, t *testing.T) ([]corev1.Pod, []string) {
	t.Helper()
	pods := e.c.waitPodsReady(ctx, t, ns, routerSel, -1, 2*time.Minute)
	return pods, podURLs(pods, 8080)
}

// workerURLs are the URLs the routers should hold for the Ready workers.
func (e *env) workerURLs(ctx context.Context, t *testing.T, want int) []string {
	t.Helper()
	pods := e.c.waitPodsReady(ctx, t, ns, workerSel, want, 4*time.Minute)
	urls := podURLs(pods, 8000)
	slices.Sort(urls)
	return urls
}

// waitRoutersSee waits until every router pod holds exactly workers.
func (e *env) waitRoutersSee(ctx context.Context, t *testing.T, workers []string, timeout time.Duration) {
	t.Helper()
	_, routers := e.routerPods(ctx, t)
	eventually(ctx, t, timeout, fmt.Sprintf("routers hold workers %v", workers), func() error {
		for _, r := range routers {
			v, err := routerState(ctx, r)
			if err != nil {
				return err
			}
			if !slices.Equal(v.workers, workers) {
				return fmt.Errorf("router %s holds %v", r, v.workers)
			}
		}
		return nil
	})
}
