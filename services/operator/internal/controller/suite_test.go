package controller_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	v1alpha1 "github.com/warmpath/warmpath/services/operator/api/v1alpha1"
	"github.com/warmpath/warmpath/services/operator/internal/controller"
)

// One real kube-apiserver and etcd (envtest) and one manager running the
// reconciler serve every test in the package; each test works in its own
// namespace.
var (
	suiteOnce sync.Once
	suite     struct {
		env    *envtest.Environment
		cfg    *rest.Config
		client client.Client
		cancel context.CancelFunc
		done   chan error
		err    error
	}
	nsSerial atomic.Int32
)

var testOptions = controller.Options{
	RouterImage:     "warmpath/router:test",
	SimulatorImage:  "warmpath/vllm-sim:test",
	ModelFetchImage: "warmpath/model-fetch:test",
	CacheServerPort: 65432,
	// TestCacheServerReadiness creates it; other tests' tieredstorage
	// endpoints see it missing, which they do not check.
	CacheServerDaemonSet: "cache/cacheserver",
}

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard())
	code := m.Run()
	if suite.env != nil {
		suite.cancel()
		if err := <-suite.done; err != nil {
			fmt.Fprintln(os.Stderr, "manager:", err)
			code = 1
		}
		if err := suite.env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "envtest stop:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func newScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := controller.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}

// cluster returns a client of the shared API server, starting it and the
// operator on first use. A missing KUBEBUILDER_ASSETS fails the test:
// skipping would hide that the operator went untested.
func cluster(t *testing.T) client.Client {
	t.Helper()
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set; this test needs a real kube-apiserver and etcd. " +
			`Build them once (cached outside the repo): export KUBEBUILDER_ASSETS="$(scripts/install-envtest.sh)" ` +
			"from the repository root, or run make test-unit, which does that")
	}
	suiteOnce.Do(func() { suite.err = startSuite() })
	if suite.err != nil {
		t.Fatalf("starting the API server (KUBEBUILDER_ASSETS=%s) and operator: %v", assets, suite.err)
	}
	return suite.client
}

func startSuite() error {
	env := &envtest.Environment{
		CRDDirectoryPaths:        []string{filepath.Join("..", "..", "config", "crd")},
		ErrorIfCRDPathMissing:    true,
		ControlPlaneStartTimeout: 2 * time.Minute,
	}
	cfg, err := env.Start()
	if err != nil {
		return err
	}
	suite.env, suite.cfg = env, cfg
	scheme := newScheme()
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Cache:                  controller.CacheOptions(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		return err
	}
	r := &controller.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Scheme: scheme, Recorder: mgr.GetEventRecorder("warmpath-operator"), Options: testOptions}
	if err := r.SetupWithManager(mgr); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	suite.cancel, suite.done = cancel, make(chan error, 1)
	go func() { suite.done <- mgr.Start(ctx) }()
	// The test client reads straight from the API server, not a cache.
	suite.client, err = client.New(cfg, client.Options{Scheme: scheme})
	return err
}

// namespace creates a fresh namespace for one test.
func namespace(t *testing.T, c client.Client) string {
	t.Helper()
	ns := fmt.Sprintf("t%d", nsSerial.Add(1))
	if err := c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	return ns
}

// eventually polls cond until it returns nil or 30 s pass.
func eventually(t *testing.T, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// get waits until the named object exists and reads it into obj.
func get(t *testing.T, c client.Client, ns, name string, obj client.Object) {
	t.Helper()
	eventually(t, fmt.Sprintf("%T %s/%s exists", obj, ns, name), func() error {
		return c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, obj)
	})
}

// gone waits until the named object does not exist.
func gone(t *testing.T, c client.Client, ns, name string, obj client.Object) {
	t.Helper()
	eventually(t, fmt.Sprintf("%T %s/%s is deleted", obj, ns, name), func() error {
		err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, obj)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		return fmt.Errorf("still exists")
	})
}

// minimal is a valid endpoint with only the required fields.
func minimal(ns, name string) *v1alpha1.InferenceEndpointConfig {
	return &v1alpha1.InferenceEndpointConfig{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.InferenceEndpointConfigSpec{
			ModelName: "llama",
			ModelSourceConfig: v1alpha1.ModelSourceConfig{
				ModelSourceType:  v1alpha1.ModelSourceHuggingFace,
				HuggingFaceModel: &v1alpha1.HuggingFaceModel{ModelID: "meta-llama/Llama-3.1-8B-Instruct"},
			},
			Worker: v1alpha1.WorkerSpec{Image: "lmcache/vllm-openai:test", Args: []string{"--max-model-len", "8192"}},
		},
	}
}

// setReady writes a Deployment status as the Deployment controller would
// (envtest runs no controllers).
func setReady(t *testing.T, c client.Client, ns, name string, ready int32) {
	t.Helper()
	eventually(t, "setting "+name+" status", func() error {
		var d appsv1.Deployment
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &d); err != nil {
			return err
		}
		d.Status = appsv1.DeploymentStatus{
			ObservedGeneration: d.Generation, Replicas: ready, UpdatedReplicas: ready, ReadyReplicas: ready, AvailableReplicas: ready,
		}
		return c.Status().Update(context.Background(), &d)
	})
}

// editSpec applies f to the latest iec from the API server and stores it,
// again on a conflict with the operator's status writes.
func editSpec(t *testing.T, c client.Client, iec *v1alpha1.InferenceEndpointConfig, f func(*v1alpha1.InferenceEndpointConfig)) {
	t.Helper()
	eventually(t, "updating "+iec.Name, func() error {
		var cur v1alpha1.InferenceEndpointConfig
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(iec), &cur); err != nil {
			return err
		}
		f(&cur)
		return c.Update(context.Background(), &cur)
	})
}

// waitStatus polls iec from the API server until check accepts it.
func waitStatus(t *testing.T, c client.Client, iec *v1alpha1.InferenceEndpointConfig, what string, check func(*v1alpha1.InferenceEndpointConfig) error) {
	t.Helper()
	eventually(t, what, func() error {
		var cur v1alpha1.InferenceEndpointConfig
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(iec), &cur); err != nil {
			return err
		}
		return check(&cur)
	})
}
