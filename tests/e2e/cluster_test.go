package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// iecGVR is the operator's InferenceEndpointConfig resource.
var iecGVR = schema.GroupVersionResource{Group: "inference.warmpath.io", Version: "v1alpha1", Resource: "inferenceendpointconfigs"}

// cluster is the cluster under test, reached with client-go for checks and
// with the helm and kubectl commands for what a user types.
type cluster struct {
	kubeconfig string
	// nodeIP is the node's address, where the API server listens: a
	// server the suite runs on it is reachable from pods and from the
	// API server alike.
	nodeIP string
	cs     kubernetes.Interface
	dyn    dynamic.Interface
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	kc := os.Getenv("WARMPATH_E2E_KUBECONFIG")
	if kc == "" {
		t.Skip("no cluster: WARMPATH_E2E_KUBECONFIG is unset (make test-e2e)")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatalf("kubeconfig %s: %v", kc, err)
	}
	api, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatalf("kubeconfig %s: server %q: %v", kc, cfg.Host, err)
	}
	cfg.QPS, cfg.Burst = 50, 100
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &cluster{kubeconfig: kc, nodeIP: api.Hostname(), cs: cs, dyn: dyn}
}

// repoRoot is the repository's root directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("cannot locate the test's source file")
	}
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// cli runs a command-line tool (helm, kubectl) against the cluster, as a
// user would, and returns its combined output.
func (c *cluster) cli(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+c.kubeconfig)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, out.String())
	}
	return out.String(), nil
}

func (c *cluster) mustCLI(ctx context.Context, t *testing.T, name string, args ...string) string {
	t.Helper()
	t.Logf("$ %s %s", name, strings.Join(args, " "))
	out, err := c.cli(ctx, name, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// waitPodsReady waits until every pod matching selector in ns is Ready and
// there are want of them (want < 0: any number, at least one), none
// terminating.
func (c *cluster) waitPodsReady(ctx context.Context, t *testing.T, ns, selector string, want int, timeout time.Duration) []corev1.Pod {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for {
		pods, err := c.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err == nil {
			var ready []corev1.Pod
			notReady := 0
			for _, p := range pods.Items {
				if p.DeletionTimestamp == nil && podReady(&p) {
					ready = append(ready, p)
				} else {
					notReady++
				}
			}
			if notReady == 0 && len(ready) > 0 && (want < 0 || len(ready) == want) {
				return ready
			}
			last = fmt.Sprintf("%d ready, %d not ready or terminating, want %d", len(ready), notReady, want)
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("pods %q in %s not ready after %s: %s", selector, ns, timeout, last)
		}
		time.Sleep(time.Second)
	}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// diagnose writes what an operator would look at first into the test log:
// the pods, a describe of each pod that is not Ready, the recent events,
// and the logs of every container in the namespaces.
func (c *cluster) diagnose(t *testing.T, namespaces ...string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	show := func(name string, args ...string) {
		out, err := c.cli(ctx, name, args...)
		if err != nil {
			out = err.Error()
		}
		t.Logf("diagnosis: $ %s %s\n%s", name, strings.Join(args, " "), out)
	}
	show("kubectl", "get", "nodes,pods,svc,endpointslices,deploy,ds", "-A", "-o", "wide")
	for _, ns := range namespaces {
		show("kubectl", "-n", ns, "get", "inferenceendpointconfigs", "-o", "yaml")
		pods, err := c.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Logf("diagnosis: list pods in %s: %v", ns, err)
			continue
		}
		for _, p := range pods.Items {
			if !podReady(&p) {
				show("kubectl", "-n", ns, "describe", "pod", p.Name)
			}
			show("kubectl", "-n", ns, "logs", p.Name, "--all-containers", "--tail=60", "--prefix")
		}
		show("kubectl", "-n", ns, "get", "events", "--sort-by=.lastTimestamp")
	}
	show("kubectl", "-n", "kube-system", "get", "events", "--sort-by=.lastTimestamp")
}
