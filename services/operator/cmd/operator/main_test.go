package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	v1alpha1 "github.com/warmpath/warmpath/services/operator/api/v1alpha1"

	"github.com/warmpath/warmpath/libs/testnet"
)

// TestRunServesAndReconciles starts the operator binary's run against a
// real API server (envtest): it must win leader election, answer its
// probes and metrics, and reconcile an endpoint with the flags' images.
func TestRunServesAndReconciles(t *testing.T) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Fatal(`KUBEBUILDER_ASSETS is not set: export KUBEBUILDER_ASSETS="$(scripts/install-envtest.sh)" or run make test-unit`)
	}
	env := &envtest.Environment{CRDDirectoryPaths: []string{filepath.Join("..", "..", "config", "crd")}, ErrorIfCRDPathMissing: true}
	cfg, err := env.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Error(err)
		}
	})
	user, err := env.AddUser(envtest.User{Name: "operator", Groups: []string{"system:masters"}}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	kc, err := user.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, kc, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", kubeconfig)

	probe, metrics := testnet.FreeAddr(t), testnet.FreeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--health-probe-bind-address=" + probe, "--metrics-bind-address=" + metrics,
			"--leader-election-namespace=default", "--router-image=example/router:1", "--log-level=error"})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("run did not return after cancel")
		}
	})

	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	poll := func(what string, f func() error) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			err := f()
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %v", what, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	httpOK := func(url string) func() error {
		return func() error {
			resp, err := http.Get(url)
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%s: %d", url, resp.StatusCode)
			}
			return nil
		}
	}
	poll("/healthz", httpOK("http://"+probe+"/healthz"))
	poll("/readyz", httpOK("http://"+probe+"/readyz"))
	poll("/metrics", httpOK("http://"+metrics+"/metrics"))
	poll("leader Lease", func() error {
		var l coordinationv1.Lease
		return c.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: "operator.inference.warmpath.io"}, &l)
	})

	iec := &v1alpha1.InferenceEndpointConfig{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "smoke"},
		Spec: v1alpha1.InferenceEndpointConfigSpec{
			ModelName: "m",
			ModelSourceConfig: v1alpha1.ModelSourceConfig{
				ModelSourceType: v1alpha1.ModelSourceHuggingFace, HuggingFaceModel: &v1alpha1.HuggingFaceModel{ModelID: "org/m"},
			},
			IntelligentRoutingSpec: v1alpha1.IntelligentRoutingSpec{Enabled: new(true)},
			Worker:                 v1alpha1.WorkerSpec{Image: "vllm:test"},
		},
	}
	if err := c.Create(context.Background(), iec); err != nil {
		t.Fatal(err)
	}
	var router appsv1.Deployment
	poll("router Deployment", func() error {
		return c.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: "smoke-router"}, &router)
	})
	if img := router.Spec.Template.Spec.Containers[0].Image; img != "example/router:1" {
		t.Errorf("router image %q, want the --router-image flag's", img)
	}
}
