package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/warmpath/warmpath/libs/testnet"
	"github.com/warmpath/warmpath/tests/harness"
)

// startPrometheus runs Prometheus (WARMPATH_E2E_PROMETHEUS: build.sh's,
// which has the Kubernetes service discovery Debian's leaves out) on
// loopback, discovering the cluster's pods through the API server: every pod of the release's namespace
// with a port named http or metrics is scraped, labelled as the operator's
// ServiceMonitors label it (namespace, pod, and endpoint from the
// InferenceEndpointConfig's label). It returns Prometheus' URL.
func startPrometheus(ctx context.Context, t *testing.T, kubeconfig string) string {
	t.Helper()
	bin := os.Getenv("WARMPATH_E2E_PROMETHEUS")
	if bin == "" {
		t.Fatal("WARMPATH_E2E_PROMETHEUS is unset: scripts/k8s-node/build.sh builds it (make test-e2e)")
	}
	dir := t.TempDir()
	cfg := fmt.Sprintf(`global: {scrape_interval: 2s, evaluation_interval: 2s}
scrape_configs:
  - job_name: warmpath
    kubernetes_sd_configs:
      - role: pod
        kubeconfig_file: %q
        namespaces: {names: [%q]}
    relabel_configs:
      - {source_labels: [__meta_kubernetes_pod_container_port_name], regex: "http|metrics", action: keep}
      - {source_labels: [__meta_kubernetes_pod_phase], regex: Running, action: keep}
      - {source_labels: [__meta_kubernetes_namespace], target_label: namespace}
      - {source_labels: [__meta_kubernetes_pod_name], target_label: pod}
      - {source_labels: [__meta_kubernetes_pod_label_inference_warmpath_io_endpoint], target_label: endpoint}
`, kubeconfig, ns)
	path := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := testnet.FreeAddr(t)
	harness.StartProcess(ctx, t, bin, "--config.file="+path, "--storage.tsdb.path="+filepath.Join(dir, "tsdb"),
		"--web.listen-address="+addr, "--log.level=warn")
	prom := "http://" + addr
	eventually(ctx, t, time.Minute, "prometheus ready", func() error {
		_, err := harness.GetBody(ctx, prom+"/-/ready")
		return err
	})
	return prom
}

// testDashboards: with kvaware routing (whose index and event panels need
// it) and a spell of traffic, including a request the router rejects, every
// query of every committed dashboard returns data from the cluster.
func testDashboards(ctx context.Context, t *testing.T, e *env) {
	_, routers := e.routerPods(ctx, t)
	e.setStrategy(ctx, t, routers, "kvaware")
	l := startLoad(ctx, e.router, 3)
	cl := newClient(e.router)
	for i := 0; i < 30; i++ {
		if _, err := chat(ctx, cl, longPrompt("dash"), fmt.Sprintf("Question %d", i), i%2 == 0); err != nil {
			t.Errorf("chat %d: %v", i, err)
		}
		// A model no worker serves: the router rejects it, which one panel shows.
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.router+"/v1/completions",
			bytes.NewReader([]byte(`{"model":"no-such-model","prompt":"x"}`)))
		req.Header.Set("Content-Type", "application/json")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_ = resp.Body.Close()
		}
		time.Sleep(500 * time.Millisecond)
	}
	l.finish(t, "load for the dashboards")
	harness.CheckDashboards(ctx, t, e.prom, filepath.Join(e.root, "dashboards"))
}
