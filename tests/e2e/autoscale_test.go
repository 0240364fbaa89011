package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/warmpath/warmpath/tests/harness"
)

// apiServiceGVR is the aggregation layer's APIService.
var apiServiceGVR = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}

// The autoscaling step's sizes: two running sequences per worker and
// twelve clients keep about four requests waiting at each of two workers,
// four times the target, so the HPA asks for the most it may have.
const (
	autoscaleMaxSeqs   = 2
	autoscaleClients   = 12
	autoscaleMax       = 3
	autoscaleOutTokens = 200 // about 1.5 s of decoding at the preset's 7 ms a step
)

// testAutoscaling: with autoScalingSpec set, the operator writes an HPA
// (KEDA is not installed), the real HPA controller in the node's
// kube-controller-manager reads vllm:num_requests_waiting through
// prometheus-adapter (built from the Go module proxy, with the rules
// docs/operator.md gives users) from the suite's Prometheus, scales the
// workers up under a sustained queue and back down once it drains, and
// the operator leaves the count to it; no request fails meanwhile. The
// endpoint goes back to two fixed workers afterwards.
func testAutoscaling(ctx context.Context, t *testing.T, e *env) {
	startMetricsAdapter(ctx, t, e)
	deploy := endpoint + "-worker"

	// vllm-sim takes its flags from VLLM_SIM_<FLAG> too (the operator
	// passes a simulated worker none of the user's vLLM args).
	e.c.patchEndpoint(ctx, t, fmt.Sprintf(`{"spec":{"worker":{"environmentVariables":[{"name":"VLLM_SIM_MAX_NUM_SEQS","value":"%d"}]},`+
		`"autoScalingSpec":{"minReplicaCount":1,"maxReplicaCount":%d,"scaleDownStabilizationTime":10,`+
		`"targets":{"waitingRequestsPerWorker":1}}}}`, autoscaleMaxSeqs, autoscaleMax))
	t.Cleanup(func() {
		// Back to the chart's two fixed workers for the steps after.
		e.c.patchEndpoint(context.WithoutCancel(ctx), t, `{"spec":{"worker":{"environmentVariables":null},"autoScalingSpec":null,"replicas":2}}`)
		e.waitRoutersSee(context.WithoutCancel(ctx), t, e.workerURLs(context.WithoutCancel(ctx), t, 2), 3*time.Minute)
	})
	eventually(ctx, t, 2*time.Minute, "AutoscalingReady names the HPA", func() error {
		c, err := e.c.endpointCondition(ctx, "AutoscalingReady")
		if err != nil {
			return err
		}
		if c["status"] != "True" || c["reason"] != "HorizontalPodAutoscaler" {
			return fmt.Errorf("AutoscalingReady %v: %v", c["status"], c["reason"])
		}
		return nil
	})
	// The HPA finds its metric through the adapter before any load: the
	// pipeline works end to end, and an idle endpoint reads as no queue.
	eventually(ctx, t, 3*time.Minute, "the HPA reads vllm:num_requests_waiting", func() error {
		h, err := e.c.cs.AutoscalingV2().HorizontalPodAutoscalers(ns).Get(ctx, deploy, metav1.GetOptions{})
		if err != nil {
			return err
		}
		return hpaHasMetric(h)
	})
	// The environment change rolled the workers; the load starts on
	// settled ones.
	e.waitRoutersSee(ctx, t, e.workerURLs(ctx, t, -1), 3*time.Minute)

	l := startQueueLoad(ctx, e.router, autoscaleClients)
	start := time.Now()
	waitWorkerReplicas(ctx, t, e, deploy, autoscaleMax, 4*time.Minute)
	t.Logf("the HPA scaled the workers to %d in %s under a queue", autoscaleMax, time.Since(start).Round(time.Second))
	e.waitRoutersSee(ctx, t, e.workerURLs(ctx, t, autoscaleMax), 3*time.Minute)
	// The operator reconciles on the Deployment's and the HPA's changes; a
	// fight over the count would show within a few of them.
	for range 10 {
		time.Sleep(time.Second)
		d, err := e.c.cs.AppsV1().Deployments(ns).Get(ctx, deploy, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if d.Spec.Replicas == nil || *d.Spec.Replicas != autoscaleMax {
			t.Fatalf("worker Deployment went back to %v replicas under the HPA's %d", d.Spec.Replicas, autoscaleMax)
		}
	}
	l.finish(t, "load that queued at the workers")

	start = time.Now()
	waitWorkerReplicas(ctx, t, e, deploy, 1, 4*time.Minute)
	t.Logf("the HPA scaled the workers down to 1 in %s once the queue drained", time.Since(start).Round(time.Second))
	e.waitRoutersSee(ctx, t, e.workerURLs(ctx, t, 1), 3*time.Minute)
	h, err := e.c.cs.AutoscalingV2().HorizontalPodAutoscalers(ns).Get(ctx, deploy, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("HPA %s: current %d, desired %d, last scaled %v", h.Name, h.Status.CurrentReplicas, h.Status.DesiredReplicas, h.Status.LastScaleTime)
}

// hpaHasMetric is nil once the HPA's status shows a value of the waiting
// requests metric and its ScalingActive condition holds.
func hpaHasMetric(h *autoscalingv2.HorizontalPodAutoscaler) error {
	active := false
	var why string
	for _, c := range h.Status.Conditions {
		if c.Type == autoscalingv2.ScalingActive {
			active, why = c.Status == corev1.ConditionTrue, c.Reason+": "+c.Message
		}
	}
	if !active {
		return fmt.Errorf("ScalingActive not true (%s)", why)
	}
	for _, m := range h.Status.CurrentMetrics {
		if m.Pods != nil && m.Pods.Metric.Name == "vllm:num_requests_waiting" {
			return nil
		}
	}
	return fmt.Errorf("no vllm:num_requests_waiting among current metrics %v", h.Status.CurrentMetrics)
}

// waitWorkerReplicas waits until the worker Deployment asks for want pods
// and has them ready.
func waitWorkerReplicas(ctx context.Context, t *testing.T, e *env, deploy string, want int32, timeout time.Duration) {
	t.Helper()
	eventually(ctx, t, timeout, fmt.Sprintf("worker Deployment at %d ready replicas", want), func() error {
		d, err := e.c.cs.AppsV1().Deployments(ns).Get(ctx, deploy, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if d.Spec.Replicas == nil || *d.Spec.Replicas != want || d.Status.ReadyReplicas != want {
			h, _ := e.c.cs.AutoscalingV2().HorizontalPodAutoscalers(ns).Get(ctx, deploy, metav1.GetOptions{})
			var metric string
			if h != nil {
				for _, m := range h.Status.CurrentMetrics {
					if m.Pods != nil {
						metric = m.Pods.Current.AverageValue.String()
					}
				}
			}
			return fmt.Errorf("spec %v, ready %d; HPA sees %s waiting per worker", ptrValue(d.Spec.Replicas), d.Status.ReadyReplicas, metric)
		}
		return nil
	})
}

func ptrValue(p *int32) string {
	if p == nil {
		return "unset"
	}
	return strconv.Itoa(int(*p))
}

// startQueueLoad keeps conns completions with long answers in flight
// through the router, so requests wait at workers that run few at once.
func startQueueLoad(ctx context.Context, baseURL string, conns int) *load {
	ctx, cancel := context.WithCancel(ctx)
	l := &load{stop: cancel}
	for w := range conns {
		cl := newClient(baseURL)
		l.done.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				_, err := cl.Completions.New(ctx, openai.CompletionNewParams{
					Model:     openai.CompletionNewParamsModel(model),
					Prompt:    openai.CompletionNewParamsPromptUnion{OfString: openai.String(fmt.Sprintf("Queue %d of client %d: tell a long story.", i, w))},
					MaxTokens: openai.Int(autoscaleOutTokens),
				})
				l.record(ctx, err)
			}
		})
	}
	return l
}

// startMetricsAdapter runs prometheus-adapter (WARMPATH_E2E_PROMETHEUS_ADAPTER,
// built by build.sh) on the node's address, reading the suite's Prometheus
// with the committed rules, and registers it with the aggregation layer as
// custom.metrics.k8s.io and external.metrics.k8s.io: a Service without a
// selector whose endpoint is the node's address, and the APIServices. All of
// it is removed when the step ends, since an APIService whose server is
// gone breaks discovery (helm's and kubectl's) for the steps after.
func startMetricsAdapter(ctx context.Context, t *testing.T, e *env) {
	t.Helper()
	bin := os.Getenv("WARMPATH_E2E_PROMETHEUS_ADAPTER")
	if bin == "" {
		t.Fatal("WARMPATH_E2E_PROMETHEUS_ADAPTER is unset: scripts/k8s-node/build.sh builds it (make test-e2e)")
	}
	nodeIP := e.c.nodeIP
	ln, err := net.Listen("tcp", net.JoinHostPort(nodeIP, "0"))
	if err != nil {
		t.Fatalf("a port on the node's address: %v", err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	dir := t.TempDir()
	harness.StartProcess(ctx, t, bin,
		"--secure-port="+strconv.Itoa(port), "--bind-address="+nodeIP, "--cert-dir="+filepath.Join(dir, "certs"),
		"--lister-kubeconfig="+e.c.kubeconfig, "--authentication-kubeconfig="+e.c.kubeconfig, "--authorization-kubeconfig="+e.c.kubeconfig,
		"--prometheus-url="+e.prom, "--metrics-relist-interval=5s",
		"--config="+filepath.Join(e.root, "services", "operator", "config", "prometheus-adapter", "rules.yaml"), "--v=2")

	const name = "e2e-metrics-adapter"
	// A selector-less Service's endpoints: the mirroring controller
	// derives its EndpointSlice, which the aggregator routes to.
	svcs, eps := e.c.cs.CoreV1().Services(ns), e.c.cs.CoreV1().Endpoints(ns)
	t.Cleanup(func() {
		ctx := context.WithoutCancel(ctx)
		for _, v := range []string{"v1beta1.custom.metrics.k8s.io", "v1beta2.custom.metrics.k8s.io", "v1beta1.external.metrics.k8s.io"} {
			if err := e.c.dyn.Resource(apiServiceGVR).Delete(ctx, v, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("delete APIService %s: %v", v, err)
			}
		}
		_ = eps.Delete(ctx, name, metav1.DeleteOptions{})
		_ = svcs.Delete(ctx, name, metav1.DeleteOptions{})
	})
	if _, err := svcs.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "https", Port: 443, TargetPort: intstr.FromInt32(int32(port))}}}},
		metav1.CreateOptions{}); err != nil {
		t.Fatalf("Service %s: %v", name, err)
	}
	if _, err := eps.Create(ctx, &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Name: name}, //nolint:staticcheck // v1 Endpoints, deprecated: see eps above
		Subsets: []corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{{IP: nodeIP}}, //nolint:staticcheck // v1 Endpoints, deprecated: see eps above
			Ports: []corev1.EndpointPort{{Name: "https", Port: int32(port)}}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("Endpoints %s: %v", name, err)
	}
	for _, gv := range []struct{ group, version string }{
		{"custom.metrics.k8s.io", "v1beta1"}, {"custom.metrics.k8s.io", "v1beta2"}, {"external.metrics.k8s.io", "v1beta1"},
	} {
		// The adapter's serving certificate is self-signed (--cert-dir):
		// the test trusts it as the upstream deployment manifests do.
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
			"metadata": map[string]any{"name": gv.version + "." + gv.group},
			"spec": map[string]any{
				"group": gv.group, "version": gv.version, "insecureSkipTLSVerify": true,
				"groupPriorityMinimum": int64(100), "versionPriority": int64(100),
				"service": map[string]any{"namespace": ns, "name": name, "port": int64(443)},
			},
		}}
		if _, err := e.c.dyn.Resource(apiServiceGVR).Create(ctx, u, metav1.CreateOptions{}); err != nil {
			t.Fatalf("APIService %s.%s: %v", gv.version, gv.group, err)
		}
	}
	eventually(ctx, t, 2*time.Minute, "custom.metrics.k8s.io served through the aggregation layer", func() error {
		_, err := e.c.cs.Discovery().RESTClient().Get().AbsPath("/apis/custom.metrics.k8s.io/v1beta2").DoRaw(ctx)
		return err
	})
	t.Logf("prometheus-adapter serves custom.metrics.k8s.io from %s on %s:%d", e.prom, nodeIP, port)
}

// TestAdapterRulesDocumented: the prometheus-adapter rules docs/operator.md
// shows users are the committed file the autoscaling step runs with.
func TestAdapterRulesDocumented(t *testing.T) {
	root := repoRoot(t)
	rules, err := os.ReadFile(filepath.Join(root, "services", "operator", "config", "prometheus-adapter", "rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "operator.md"))
	if err != nil {
		t.Fatal(err)
	}
	// The file's rules, without its comment header.
	body := string(rules)
	if i := strings.Index(body, "rules:"); i >= 0 {
		body = body[i:]
	}
	if !strings.Contains(string(doc), "```yaml\n"+body+"```") {
		t.Errorf("docs/operator.md does not show services/operator/config/prometheus-adapter/rules.yaml's rules verbatim in a yaml block:\n%s", body)
	}
}
