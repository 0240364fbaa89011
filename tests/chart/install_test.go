package chart

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/warmpath/warmpath/libs/gobuild"
	"github.com/warmpath/warmpath/libs/parentdeath"
	"github.com/warmpath/warmpath/libs/testnet"
)

// TestInstallOnAPIServer installs the chart for real: its CRD and every
// manifest of the sim profile are applied with server-side apply to a real
// kube-apiserver and etcd (envtest), which validates each object — the
// InferenceEndpointConfigs against the operator's CRD schema included. Then
// the operator binary runs with the rendered Deployment's own arguments,
// as the chart's ServiceAccount, holding only the chart's RBAC, and must
// create the endpoint's children.
func TestInstallOnAPIServer(t *testing.T) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Fatal(`KUBEBUILDER_ASSETS is not set: export KUBEBUILDER_ASSETS="$(scripts/install-envtest.sh)" from the repository root, or run make test`)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	env := &envtest.Environment{}
	cfg, err := env.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Error(err)
		}
	})
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, appsv1.AddToScheme, rbacv1.AddToScheme, apiextensionsv1.AddToScheme, coordinationv1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	const ns = "warmpath"
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}

	// The CRD first, as Helm installs crds/ before templates.
	for _, crd := range loadChart(t).CRDObjects() {
		apply(ctx, t, c, crd.File.Data, "")
	}
	waitFor(ctx, t, "the CRD to be established", func() bool {
		var crd apiextensionsv1.CustomResourceDefinition
		if err := c.Get(ctx, client.ObjectKey{Name: "inferenceendpointconfigs.inference.warmpath.io"}, &crd); err != nil {
			return false
		}
		for _, cond := range crd.Status.Conditions {
			if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
				return true
			}
		}
		return false
	})

	out, err := render(t, loadValues(t, "values-sim.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var operatorArgs []string
	for _, doc := range strings.Split(out, "\n---") {
		if strings.Contains(doc, "helm.sh/hook") || strings.TrimSpace(stripComments(strings.TrimPrefix(doc, "---"))) == "" {
			continue
		}
		u := apply(ctx, t, c, []byte(doc), ns)
		if u.GetKind() == "Deployment" && strings.HasSuffix(u.GetName(), "-operator") {
			args, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
			for _, a := range args[0].(map[string]any)["args"].([]any) {
				operatorArgs = append(operatorArgs, a.(string))
			}
		}
	}
	if len(operatorArgs) == 0 {
		t.Fatal("no operator Deployment rendered")
	}
	checkAuthSecretKept(t, c, cfg, ns)

	// The operator, as the chart's ServiceAccount, with the chart's RBAC
	// only.
	user, err := env.AddUser(envtest.User{Name: "system:serviceaccount:" + ns + ":wp-warmpath-operator",
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	kc, err := user.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	// The API server enforces RBAC (so the operator's success below means
	// the chart's rules suffice): the ServiceAccount may not read Secrets.
	asOperator, err := client.New(user.Config(), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	if err := asOperator.List(ctx, &corev1.SecretList{}, client.InNamespace(ns)); err == nil {
		t.Fatal("the operator's ServiceAccount may list Secrets: RBAC is not enforced, or the chart grants too much")
	}
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, kc, 0o600); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "operator")
	if err := gobuild.Build(ctx, "", "github.com/warmpath/warmpath/services/operator/cmd/operator", bin); err != nil {
		t.Fatal(err)
	}
	// The pod's ports are the test's to choose.
	var args []string
	for _, a := range operatorArgs {
		if !strings.HasPrefix(a, "--metrics-bind-address") && !strings.HasPrefix(a, "--health-probe-bind-address") {
			args = append(args, a)
		}
	}
	args = append(args, "--metrics-bind-address=0", "--health-probe-bind-address="+testnet.FreeAddr(t))
	op := exec.CommandContext(ctx, bin, args...)
	op.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	var logs strings.Builder
	op.Stdout, op.Stderr = &logs, &logs
	parentdeath.Tie(op, syscall.SIGKILL)
	if err := op.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = op.Process.Kill()
		_ = op.Wait()
		if t.Failed() {
			t.Logf("operator output:\n%s", logs.String())
		}
	})

	checkLeaderElectionEvent(ctx, t, c, ns)

	// The sim profile's endpoint gets workers, a router and its Service,
	// and the router its Role and RoleBinding: the API server lets the
	// operator create those without bind or escalate only because it holds
	// every permission the Role grants.
	waitFor(ctx, t, "the endpoint's children", func() bool {
		var deps appsv1.DeploymentList
		if err := c.List(ctx, &deps, client.InNamespace(ns), client.MatchingLabels{"inference.warmpath.io/endpoint": "sim-llama"}); err != nil || len(deps.Items) < 2 {
			return false
		}
		var svc corev1.Service
		var role rbacv1.Role
		var binding rbacv1.RoleBinding
		return c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "sim-llama"}, &svc) == nil &&
			c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "sim-llama-router"}, &role) == nil &&
			c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "sim-llama-router"}, &binding) == nil
	})
	var deps appsv1.DeploymentList
	if err := c.List(ctx, &deps, client.InNamespace(ns), client.MatchingLabels{"inference.warmpath.io/endpoint": "sim-llama"}); err != nil {
		t.Fatal(err)
	}
	images := map[string]bool{}
	for _, d := range deps.Items {
		// The pods the operator creates are locked down as the chart's own.
		if psc := d.Spec.Template.Spec.SecurityContext; psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
			t.Errorf("Deployment %s may run as root: %+v", d.Name, psc)
		}
		for _, ctr := range d.Spec.Template.Spec.Containers {
			images[ctr.Image] = true
			if sc := ctr.SecurityContext; sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
				sc.Capabilities == nil || len(sc.Capabilities.Drop) == 0 {
				t.Errorf("Deployment %s container %s is not locked down: %+v", d.Name, ctr.Name, sc)
			}
			if len(ctr.Resources.Requests) == 0 {
				t.Errorf("Deployment %s container %s has no resource requests", d.Name, ctr.Name)
			}
		}
	}
	for _, want := range []string{"warmpath/vllm-sim:dev", "warmpath/router:dev"} {
		if !images[want] {
			t.Errorf("no child runs %s (images %v): the chart's image flags did not reach the operator", want, images)
		}
	}
	checkUnschedulableReported(ctx, t, c, ns, deps.Items)
}

// checkUnschedulableReported creates a worker pod as the endpoint's
// ReplicaSet would and marks it unschedulable as the scheduler would
// (envtest runs neither): the operator, reading pods with only the
// chart's RBAC, must report it in the endpoint's WorkersScheduled
// condition with the scheduler's reason and message.
func checkUnschedulableReported(ctx context.Context, t *testing.T, c client.Client, ns string, deps []appsv1.Deployment) {
	t.Helper()
	var workers *appsv1.Deployment
	for i := range deps {
		if deps[i].Name == "sim-llama-worker" {
			workers = &deps[i]
		}
	}
	if workers == nil {
		t.Fatal("no worker Deployment sim-llama-worker")
	}
	// The ServiceAccount admission plugin wants the pod's ServiceAccount;
	// no controller creates "default" in envtest.
	if err := c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "default"}}); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sim-llama-worker-0", Labels: workers.Spec.Template.Labels},
		Spec:       *workers.Spec.Template.Spec.DeepCopy(),
	}
	if err := c.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	const msg = "0/2 nodes are available: 2 Insufficient cpu."
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
		Reason: corev1.PodReasonUnschedulable, Message: msg, LastTransitionTime: metav1.Now()}}
	if err := c.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, "WorkersScheduled=False (Unschedulable) on the endpoint", func() bool {
		iec := &unstructured.Unstructured{}
		iec.SetAPIVersion("inference.warmpath.io/v1alpha1")
		iec.SetKind("InferenceEndpointConfig")
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "sim-llama"}, iec); err != nil {
			return false
		}
		conds, _, _ := unstructured.NestedSlice(iec.Object, "status", "conditions")
		for _, x := range conds {
			cond, _ := x.(map[string]any)
			if cond["type"] == "WorkersScheduled" && cond["status"] == "False" && cond["reason"] == "Unschedulable" &&
				strings.Contains(fmt.Sprint(cond["message"]), msg) {
				return true
			}
		}
		return false
	})
}

// checkLeaderElectionEvent waits for the operator to win the Lease and
// for the core/v1 Event client-go's leader election records about it:
// controller-runtime still records that one through the core group's
// events API, not events.k8s.io, and a chart granting only the latter
// gets "events is forbidden" on a real cluster.
func checkLeaderElectionEvent(ctx context.Context, t *testing.T, c client.Client, ns string) {
	t.Helper()
	const lease = "operator.inference.warmpath.io"
	// The event follows the Lease within a second or two; a refused one
	// never comes, so do not wait out the whole test's deadline.
	ctx, cancel := context.WithTimeout(ctx, 45*time.Second)
	defer cancel()
	waitFor(ctx, t, "the operator to hold the leader election Lease", func() bool {
		var l coordinationv1.Lease
		return c.Get(ctx, client.ObjectKey{Namespace: ns, Name: lease}, &l) == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != ""
	})
	waitFor(ctx, t, "a core/v1 LeaderElection Event about the Lease (the chart's RBAC must grant create on core events)", func() bool {
		var evs corev1.EventList
		if err := c.List(ctx, &evs, client.InNamespace(ns)); err != nil {
			return false
		}
		for _, e := range evs.Items {
			if e.Reason == "LeaderElection" && e.InvolvedObject.Kind == "Lease" && e.InvolvedObject.Name == lease {
				return true
			}
		}
		return false
	})
}

// apply server-side-applies one YAML document, defaulting its namespace.
func apply(ctx context.Context, t *testing.T, c client.Client, doc []byte, ns string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(doc, &u.Object); err != nil {
		t.Fatalf("document is not YAML: %v\n%s", err, doc)
	}
	namespaced, err := c.IsObjectNamespaced(u)
	if err != nil {
		t.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
	}
	if namespaced && u.GetNamespace() == "" {
		u.SetNamespace(ns)
	}
	if err := c.Patch(ctx, u, client.Apply, client.FieldOwner("helm"), client.ForceOwnership); err != nil { //nolint:staticcheck // client.Apply on unstructured is the SSA path for arbitrary objects
		t.Fatalf("apply %s %s: %v", u.GetKind(), u.GetName(), err)
	}
	return u
}

func waitFor(ctx context.Context, t *testing.T, what string, ok func() bool) {
	t.Helper()
	for !ok() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// checkAuthSecretKept renders the chart again as an upgrade would, with
// lookup reaching the API server, and requires the cache server's
// generated token to be the one installed: an upgrade that rotated it
// would lock out every client holding the old one.
func checkAuthSecretKept(t *testing.T, c client.Client, cfg *rest.Config, ns string) {
	t.Helper()
	var installed corev1.Secret
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "wp-warmpath-cacheserver-auth"}, &installed); err != nil {
		t.Fatalf("the generated auth Secret was not installed: %v", err)
	}
	chrt := loadChart(t)
	vals, err := chartutil.ToRenderValues(chrt, loadValues(t, "values-sim.yaml"),
		chartutil.ReleaseOptions{Name: "wp", Namespace: ns, IsUpgrade: true}, chartutil.DefaultCapabilities)
	if err != nil {
		t.Fatal(err)
	}
	files, err := engine.RenderWithClient(chrt, vals, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var upgraded corev1.Secret
	if err := yaml.Unmarshal([]byte(files["warmpath/templates/cacheserver/secret.yaml"]), &upgraded); err != nil {
		t.Fatal(err)
	}
	if got, want := string(upgraded.Data["token"]), string(installed.Data["token"]); got == "" || got != want {
		t.Errorf("an upgrade renders token %q, the installed one is %q", got, want)
	}
}
