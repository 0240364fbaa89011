package controller_test

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	sigsyaml "sigs.k8s.io/yaml"

	v1alpha1 "github.com/warmpath/warmpath/services/operator/api/v1alpha1"
	"github.com/warmpath/warmpath/services/operator/internal/controller"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// TestWorkerGolden creates one endpoint per cache/routing combination and
// compares the worker container the API server stores (args and env) with
// testdata/<case>.golden.yaml.
func TestWorkerGolden(t *testing.T) {
	c := cluster(t)
	ns := namespace(t, c)
	cases := []struct {
		name string
		edit func(*v1alpha1.InferenceEndpointConfig)
	}{
		{"nocache-norouting", func(e *v1alpha1.InferenceEndpointConfig) {
			e.Spec.KVCacheSpec.EnableL1Cache = ptr.To(false)
		}},
		{"l1-norouting", func(*v1alpha1.InferenceEndpointConfig) {}},
		{"tieredstorage-prefixaware", func(e *v1alpha1.InferenceEndpointConfig) {
			e.Spec.KVCacheSpec.EnableL2Cache = ptr.To(true)
			e.Spec.KVCacheSpec.L2CacheSpec = &v1alpha1.L2CacheSpec{L2CacheBackend: "TieredStorage"}
			e.Spec.IntelligentRoutingSpec = v1alpha1.IntelligentRoutingSpec{Enabled: ptr.To(true), RoutingStrategy: v1alpha1.StrategyPrefixAware}
		}},
		{"redis-kvaware", func(e *v1alpha1.InferenceEndpointConfig) {
			e.Spec.KVCacheSpec.EnableL2Cache = ptr.To(true)
			e.Spec.KVCacheSpec.L2CacheSpec = &v1alpha1.L2CacheSpec{L2CacheBackend: "redis", L2CacheLocalUrl: "redis://redis.default.svc:6379"}
			e.Spec.IntelligentRoutingSpec = v1alpha1.IntelligentRoutingSpec{Enabled: ptr.To(true), RoutingStrategy: v1alpha1.StrategyKVAware}
			e.Spec.ModelSourceConfig.HuggingFaceModel.TokenSecretRef = &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "hf"}, Key: "token"}
		}},
		{"redis-password", func(e *v1alpha1.InferenceEndpointConfig) {
			e.Spec.KVCacheSpec.EnableL2Cache = ptr.To(true)
			e.Spec.KVCacheSpec.L2CacheSpec = &v1alpha1.L2CacheSpec{L2CacheBackend: "redis", L2CacheLocalUrl: "redis://redis.default.svc:6379",
				PasswordSecretRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "redis"}, Key: "password"}}
		}},
		{"cacheconfigfile-session", func(e *v1alpha1.InferenceEndpointConfig) {
			e.Spec.KVCacheSpec.CacheConfigFile = "chunk_size: 256\nlocal_cpu: true\n"
			e.Spec.IntelligentRoutingSpec = v1alpha1.IntelligentRoutingSpec{Enabled: ptr.To(true), RoutingStrategy: v1alpha1.StrategySession}
		}},
		{"pvc-l1-roundrobin-userenv", func(e *v1alpha1.InferenceEndpointConfig) {
			e.Spec.ModelSourceConfig = v1alpha1.ModelSourceConfig{
				ModelSourceType: v1alpha1.ModelSourceKubernetesVolume, KubernetesVolume: &v1alpha1.KubernetesVolume{ClaimName: "weights"}, ModelLocation: "llama",
			}
			e.Spec.Worker.ModelVolumeMount = &v1alpha1.ModelVolumeMount{Name: "weights", MountPath: "/models"}
			e.Spec.Worker.EnvironmentVariables = []corev1.EnvVar{{Name: "VLLM_LOGGING_LEVEL", Value: "DEBUG"}, {Name: "PYTHONHASHSEED", Value: "42"}}
			e.Spec.IntelligentRoutingSpec = v1alpha1.IntelligentRoutingSpec{Enabled: ptr.To(true), RoutingStrategy: v1alpha1.StrategyRoundRobin}
		}},
		{"simulate-tieredstorage-prefixaware", func(e *v1alpha1.InferenceEndpointConfig) {
			e.Annotations = map[string]string{v1alpha1.SimulateAnnotation: "true"}
			e.Spec.KVCacheSpec.EnableL2Cache = ptr.To(true)
			e.Spec.KVCacheSpec.L2CacheSpec = &v1alpha1.L2CacheSpec{L2CacheBackend: "tieredstorage"}
			e.Spec.IntelligentRoutingSpec = v1alpha1.IntelligentRoutingSpec{Enabled: ptr.To(true)}
		}},
		{"anchor-mountpath-model", func(e *v1alpha1.InferenceEndpointConfig) {
			e.Spec.Worker.Args = []string{"--model", "/opt/ml/model", "--tensor-parallel-size", "4"}
			e.Spec.Worker.ModelVolumeMount = &v1alpha1.ModelVolumeMount{Name: "model-weights", MountPath: "/opt/ml/model"}
		}},
		// The managed offering's samples name the model positionally
		// (vllm serve /opt/ml/model): for a Hub model it becomes the Hub
		// id, and no --model is added.
		{"anchor-positional-model", func(e *v1alpha1.InferenceEndpointConfig) {
			e.Spec.Worker.Args = []string{"/opt/ml/model", "--max-model-len", "4096"}
			e.Spec.Worker.ModelVolumeMount = &v1alpha1.ModelVolumeMount{Name: "model-weights", MountPath: "/opt/ml/model"}
		}},
	}
	for _, tc := range cases {
		iec := minimal(ns, tc.name)
		tc.edit(iec)
		if err := c.Create(context.Background(), iec); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var d appsv1.Deployment
			get(t, c, ns, tc.name+"-worker", &d)
			ctr := d.Spec.Template.Spec.Containers[0]
			got, err := sigsyaml.Marshal(map[string]any{"image": ctr.Image, "args": ctr.Args, "env": ctr.Env, "ports": ctr.Ports, "volumeMounts": ctr.VolumeMounts})
			if err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", tc.name+".golden.yaml")
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("worker container differs from %s (go test -update rewrites it):\n--- got\n%s\n--- want\n%s", golden, got, want)
			}
		})
	}
}

// TestChildren checks every child of a routed endpoint exists, is
// controlled by the endpoint (so the garbage collector deletes it with
// the endpoint), and carries the expected wiring.
func TestChildren(t *testing.T) {
	c := cluster(t)
	ns := namespace(t, c)
	iec := minimal(ns, "e")
	iec.Spec.IntelligentRoutingSpec.Enabled = ptr.To(true)
	iec.Spec.Worker.RequestLimits = &v1alpha1.RequestLimits{MaxConcurrentRequests: 64, MaxQueueSize: 128, OverflowStatusCode: 429}
	if err := c.Create(context.Background(), iec); err != nil {
		t.Fatal(err)
	}
	children := map[string]client.Object{
		"e-worker":  &appsv1.Deployment{},
		"e-workers": &corev1.Service{},
		"e":         &corev1.Service{},
		"e-router":  &corev1.ConfigMap{},
	}
	for name, obj := range children {
		get(t, c, ns, name, obj)
	}
	for _, obj := range []client.Object{&policyv1.PodDisruptionBudget{}, &appsv1.Deployment{}, &corev1.ServiceAccount{}, &rbacv1.Role{}, &rbacv1.RoleBinding{}} {
		name := "e-router"
		get(t, c, ns, name, obj)
		children[fmt.Sprintf("%T/%s", obj, name)] = obj
	}
	workerPDB := &policyv1.PodDisruptionBudget{}
	get(t, c, ns, "e-worker", workerPDB)
	children["PodDisruptionBudget/e-worker"] = workerPDB
	for name, obj := range children {
		ref := metav1.GetControllerOf(obj)
		if ref == nil || ref.UID != iec.UID || ref.Kind != "InferenceEndpointConfig" || !ptr.Deref(ref.BlockOwnerDeletion, false) {
			t.Errorf("%s: controller reference %+v, want the endpoint %s with blockOwnerDeletion", name, ref, iec.UID)
		}
	}

	headless := children["e-workers"].(*corev1.Service)
	if headless.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Errorf("worker Service clusterIP %q, want None (headless)", headless.Spec.ClusterIP)
	}
	front := children["e"].(*corev1.Service)
	if front.Spec.Selector["app.kubernetes.io/component"] != "router" {
		t.Errorf("endpoint Service selects %v, want the router", front.Spec.Selector)
	}
	var router appsv1.Deployment
	get(t, c, ns, "e-router", &router)
	rc := router.Spec.Template.Spec.Containers[0]
	wantArgs := []string{"--listen=0.0.0.0:8080", "--k8s-namespace=" + ns, "--k8s-selector=kubernetes.io/service-name=e-workers",
		"--k8s-port=http", "--config=/etc/warmpath/router/config.yaml",
		"--kv-events-endpoint=tcp://{host}:5557", "--kv-events-replay-endpoint=tcp://{host}:5558", "--log-format=json", "--drain-delay=5s", "--shutdown-grace=50s", "--kv-cpu-events=store-only", "--kv-cpu-chunk-tokens=256"}
	if rc.Image != testOptions.RouterImage || strings.Join(rc.Args, " ") != strings.Join(wantArgs, " ") {
		t.Errorf("router %s %q, want %s %q", rc.Image, rc.Args, testOptions.RouterImage, wantArgs)
	}
	if router.Spec.Template.Spec.ServiceAccountName != "e-router" {
		t.Errorf("router ServiceAccount %q", router.Spec.Template.Spec.ServiceAccountName)
	}
	cm := children["e-router"].(*corev1.ConfigMap)
	wantCfg := "requestLimits:\n  maxConcurrentRequests: 64\n  maxQueueSize: 128\n  overflowStatusCode: 429\nstrategy: prefixaware\n"
	if got := cm.Data[controller.RouterConfigKey]; got != wantCfg {
		t.Errorf("router config:\n%s\nwant:\n%s", got, wantCfg)
	}

	// Deleting the endpoint is accepted; envtest runs no garbage
	// collector, so the ownerReferences above are what deletes children.
	if err := c.Delete(context.Background(), iec); err != nil {
		t.Fatal(err)
	}
	gone(t, c, ns, "e", &v1alpha1.InferenceEndpointConfig{})
}

// TestStrategyChangeTouchesOnlyConfigMap switches strategy on a running
// endpoint: the router reloads its ConfigMap, so nothing else may change
// (a changed Deployment would restart pods).
func TestStrategyChangeTouchesOnlyConfigMap(t *testing.T) {
	c := cluster(t)
	ns := namespace(t, c)
	iec := minimal(ns, "s")
	iec.Spec.IntelligentRoutingSpec.Enabled = ptr.To(true)
	if err := c.Create(context.Background(), iec); err != nil {
		t.Fatal(err)
	}
	objs := map[string]client.Object{
		"worker Deployment": &appsv1.Deployment{}, "router Deployment": &appsv1.Deployment{}, "worker Service": &corev1.Service{},
		"endpoint Service": &corev1.Service{}, "router ConfigMap": &corev1.ConfigMap{},
	}
	names := map[string]string{"worker Deployment": "s-worker", "router Deployment": "s-router", "worker Service": "s-workers", "endpoint Service": "s", "router ConfigMap": "s-router"}
	versions := map[string]string{}
	// Wait for the first status write, after which the operator is idle.
	eventually(t, "status observed", func() error {
		var cur v1alpha1.InferenceEndpointConfig
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(iec), &cur); err != nil {
			return err
		}
		if cur.Status.ObservedGeneration != cur.Generation {
			return fmt.Errorf("observedGeneration %d of %d", cur.Status.ObservedGeneration, cur.Generation)
		}
		return nil
	})
	for k, obj := range objs {
		get(t, c, ns, names[k], obj)
		versions[k] = obj.GetResourceVersion()
	}
	patch := client.MergeFrom(iec.DeepCopy())
	iec.Spec.IntelligentRoutingSpec.RoutingStrategy = v1alpha1.StrategySession
	if err := c.Patch(context.Background(), iec, patch); err != nil {
		t.Fatal(err)
	}
	eventually(t, "router ConfigMap says session", func() error {
		var cm corev1.ConfigMap
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "s-router"}, &cm); err != nil {
			return err
		}
		if !strings.Contains(cm.Data[controller.RouterConfigKey], "strategy: session") {
			return fmt.Errorf("config is %q", cm.Data[controller.RouterConfigKey])
		}
		return nil
	})
	eventually(t, "generation observed", func() error {
		var cur v1alpha1.InferenceEndpointConfig
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(iec), &cur); err != nil {
			return err
		}
		if cur.Status.ObservedGeneration != cur.Generation {
			return fmt.Errorf("observedGeneration %d of %d", cur.Status.ObservedGeneration, cur.Generation)
		}
		return nil
	})
	eventually(t, "RouterConfigChanged event", func() error { return findEvent(c, ns, "s", "RouterConfigChanged") })
	for k, obj := range objs {
		get(t, c, ns, names[k], obj)
		changed := obj.GetResourceVersion() != versions[k]
		if changed != (k == "router ConfigMap") {
			t.Errorf("%s changed=%v after a strategy change (resourceVersion %s -> %s)", k, changed, versions[k], obj.GetResourceVersion())
		}
	}
}

// TestDriftIsRestored edits and deletes children behind the operator's back.
func TestDriftIsRestored(t *testing.T) {
	c := cluster(t)
	ns := namespace(t, c)
	iec := minimal(ns, "d")
	iec.Spec.IntelligentRoutingSpec.Enabled = ptr.To(true)
	if err := c.Create(context.Background(), iec); err != nil {
		t.Fatal(err)
	}
	var d appsv1.Deployment
	get(t, c, ns, "d-worker", &d)
	want := strings.Join(d.Spec.Template.Spec.Containers[0].Args, " ")
	d.Spec.Template.Spec.Containers[0].Args = []string{"--model", "something-else"}
	// A field the operator does not set survives: server-side apply
	// leaves other managers' fields alone.
	d.Spec.Template.Spec.PriorityClassName = "high"
	if err := c.Update(context.Background(), &d); err != nil {
		t.Fatal(err)
	}
	eventually(t, "worker args restored", func() error {
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(&d), &d); err != nil {
			return err
		}
		if got := strings.Join(d.Spec.Template.Spec.Containers[0].Args, " "); got != want {
			return fmt.Errorf("args %q", got)
		}
		return nil
	})
	if d.Spec.Template.Spec.PriorityClassName != "high" {
		t.Errorf("a field set by another manager was removed: priorityClassName %q", d.Spec.Template.Spec.PriorityClassName)
	}

	var cm corev1.ConfigMap
	get(t, c, ns, "d-router", &cm)
	oldUID := cm.UID
	if err := c.Delete(context.Background(), &cm); err != nil {
		t.Fatal(err)
	}
	eventually(t, "router ConfigMap recreated", func() error {
		var cur corev1.ConfigMap
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(&cm), &cur); err != nil {
			return err
		}
		if cur.UID == oldUID {
			return fmt.Errorf("still the old object")
		}
		return nil
	})
}

// TestRoutingToggle enables routing on an existing endpoint (the managed
// offering cannot) and disables it again.
func TestRoutingToggle(t *testing.T) {
	c := cluster(t)
	ns := namespace(t, c)
	iec := minimal(ns, "r")
	if err := c.Create(context.Background(), iec); err != nil {
		t.Fatal(err)
	}
	var front corev1.Service
	get(t, c, ns, "r", &front)
	if front.Spec.Selector["app.kubernetes.io/component"] != "worker" {
		t.Fatalf("without routing the endpoint Service selects %v, want the workers", front.Spec.Selector)
	}
	setRouting := func(on bool) {
		t.Helper()
		eventually(t, "patching routing", func() error {
			var cur v1alpha1.InferenceEndpointConfig
			if err := c.Get(context.Background(), client.ObjectKeyFromObject(iec), &cur); err != nil {
				return err
			}
			cur.Spec.IntelligentRoutingSpec.Enabled = ptr.To(on)
			return c.Update(context.Background(), &cur)
		})
	}
	setRouting(true)
	get(t, c, ns, "r-router", &appsv1.Deployment{})
	eventually(t, "endpoint Service selects the router", func() error {
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(&front), &front); err != nil {
			return err
		}
		if front.Spec.Selector["app.kubernetes.io/component"] != "router" {
			return fmt.Errorf("selector %v", front.Spec.Selector)
		}
		return nil
	})
	setRouting(false)
	for _, obj := range []client.Object{&appsv1.Deployment{}, &corev1.ConfigMap{}, &corev1.ServiceAccount{}, &rbacv1.Role{}, &rbacv1.RoleBinding{}, &policyv1.PodDisruptionBudget{}} {
		gone(t, c, ns, "r-router", obj)
	}
}

// TestInvalidSpecsRejected checks the schema and CEL rules reject bad
// specs with their messages.
func TestInvalidSpecsRejected(t *testing.T) {
	c := cluster(t)
	ns := namespace(t, c)
	cases := []struct {
		name string
		edit func(*v1alpha1.InferenceEndpointConfig)
		want string
	}{
		{"bad strategy", func(e *v1alpha1.InferenceEndpointConfig) { e.Spec.IntelligentRoutingSpec.RoutingStrategy = "fastest" },
			`spec.intelligentRoutingSpec.routingStrategy: Unsupported value: "fastest"`},
		{"bad backend", func(e *v1alpha1.InferenceEndpointConfig) {
			e.Spec.KVCacheSpec.L2CacheSpec = &v1alpha1.L2CacheSpec{L2CacheBackend: "memcached"}
		}, "l2CacheBackend must be tieredstorage or redis"},
		{"redis without url", func(e *v1alpha1.InferenceEndpointConfig) {
			e.Spec.KVCacheSpec.L2CacheSpec = &v1alpha1.L2CacheSpec{L2CacheBackend: "Redis"}
		}, "l2CacheLocalUrl is required when l2CacheBackend is redis"},
		{"l2 without backend", func(e *v1alpha1.InferenceEndpointConfig) { e.Spec.KVCacheSpec.EnableL2Cache = ptr.To(true) },
			"enableL2Cache needs l2CacheSpec.l2CacheBackend"},
		{"password in the url", func(e *v1alpha1.InferenceEndpointConfig) {
			e.Spec.KVCacheSpec.L2CacheSpec = &v1alpha1.L2CacheSpec{L2CacheBackend: "redis", L2CacheLocalUrl: "redis://:hunter2@redis:6379"}
		}, "l2CacheLocalUrl must not carry a password"},
		{"password for lm://", func(e *v1alpha1.InferenceEndpointConfig) {
			e.Spec.KVCacheSpec.L2CacheSpec = &v1alpha1.L2CacheSpec{L2CacheBackend: "tieredstorage",
				PasswordSecretRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "s"}, Key: "k"}}
		}, "passwordSecretRef needs an l2CacheLocalUrl other than lm://"},
		{"bad url", func(e *v1alpha1.InferenceEndpointConfig) {
			e.Spec.KVCacheSpec.L2CacheSpec = &v1alpha1.L2CacheSpec{L2CacheBackend: "redis", L2CacheLocalUrl: "http://redis:6379"}
		}, "spec.kvCacheSpec.l2CacheSpec.l2CacheLocalUrl: Invalid value"},
		{"otlp endpoint without scheme", func(e *v1alpha1.InferenceEndpointConfig) { e.Spec.Tracing.OTLPEndpoint = "otel-collector:4318" },
			"spec.tracing.otlpEndpoint: Invalid value"},
		{"sample over 100", func(e *v1alpha1.InferenceEndpointConfig) { e.Spec.Tracing.SamplePercent = ptr.To[int32](150) },
			"spec.tracing.samplePercent: Invalid value"},
		{"interval too short", func(e *v1alpha1.InferenceEndpointConfig) {
			e.Spec.Metrics.MetricsScrapeIntervalSeconds = ptr.To[int32](2)
		},
			"spec.metrics.metricsScrapeIntervalSeconds: Invalid value: 2: spec.metrics.metricsScrapeIntervalSeconds in body should be greater than or equal to 5"},
		{"interval too long", func(e *v1alpha1.InferenceEndpointConfig) {
			e.Spec.Metrics.MetricsScrapeIntervalSeconds = ptr.To[int32](301)
		},
			"should be less than or equal to 300"},
		{"negative replicas", func(e *v1alpha1.InferenceEndpointConfig) { e.Spec.Replicas = ptr.To[int32](-1) },
			"spec.replicas in body should be greater than or equal to 0"},
		{"port out of range", func(e *v1alpha1.InferenceEndpointConfig) { e.Spec.Worker.ModelInvocationPort.ContainerPort = 70000 },
			"spec.worker.modelInvocationPort.containerPort in body should be less than or equal to 65535"},
		{"huggingface without model", func(e *v1alpha1.InferenceEndpointConfig) { e.Spec.ModelSourceConfig.HuggingFaceModel = nil },
			"modelSourceType huggingface needs huggingFaceModel.modelId"},
		{"bad source type", func(e *v1alpha1.InferenceEndpointConfig) { e.Spec.ModelSourceConfig.ModelSourceType = "nfs" },
			`spec.modelSourceConfig.modelSourceType: Unsupported value: "nfs"`},
		{"s3 without s3Storage", func(e *v1alpha1.InferenceEndpointConfig) {
			e.Spec.ModelSourceConfig = v1alpha1.ModelSourceConfig{ModelSourceType: "s3"}
			e.Spec.Worker.ModelVolumeMount = &v1alpha1.ModelVolumeMount{Name: "m", MountPath: "/opt/ml/model"}
		}, "modelSourceType s3 needs s3Storage.bucketName"},
		{"s3 without a model volume mount", func(e *v1alpha1.InferenceEndpointConfig) {
			e.Spec.ModelSourceConfig = v1alpha1.ModelSourceConfig{ModelSourceType: "s3", S3Storage: &v1alpha1.S3Storage{BucketName: "models"}}
		}, "kubernetesVolume, s3 and fsx need worker.modelVolumeMount"},
		{"s3 endpoint without scheme", func(e *v1alpha1.InferenceEndpointConfig) {
			e.Spec.ModelSourceConfig = v1alpha1.ModelSourceConfig{ModelSourceType: "s3", S3Storage: &v1alpha1.S3Storage{BucketName: "models", EndpointURL: "minio:9000"}}
			e.Spec.Worker.ModelVolumeMount = &v1alpha1.ModelVolumeMount{Name: "m", MountPath: "/opt/ml/model"}
		}, "spec.modelSourceConfig.s3Storage.endpointUrl: Invalid value"},
		{"fsx without fsxStorage", func(e *v1alpha1.InferenceEndpointConfig) {
			e.Spec.ModelSourceConfig = v1alpha1.ModelSourceConfig{ModelSourceType: "fsx"}
			e.Spec.Worker.ModelVolumeMount = &v1alpha1.ModelVolumeMount{Name: "m", MountPath: "/opt/ml/model"}
		}, "modelSourceType fsx needs fsxStorage.fileSystemId"},
		{"tls certificate export not an s3 URI", func(e *v1alpha1.InferenceEndpointConfig) {
			e.Spec.TLSConfig = &v1alpha1.TLSConfig{TLSCertificateOutputS3Uri: "https://bucket/certs"}
		}, "spec.tlsConfig.tlsCertificateOutputS3Uri: Invalid value"},
		{"no image", func(e *v1alpha1.InferenceEndpointConfig) { e.Spec.Worker.Image = "" },
			"spec.worker.image in body should be at least 1 chars long"},
		// Every child name (<name>-workers the longest) must be a DNS label.
		{"name too long", func(e *v1alpha1.InferenceEndpointConfig) { e.Name = "a" + strings.Repeat("b", v1alpha1.MaxNameLength) },
			"metadata.name must be a DNS label of at most 55 characters"},
		{"name not a DNS label", func(e *v1alpha1.InferenceEndpointConfig) { e.Name = "a.b" },
			"metadata.name must be a DNS label of at most 55 characters"},
		{"name starts with a digit", func(e *v1alpha1.InferenceEndpointConfig) { e.Name = "1b" },
			"metadata.name must be a DNS label of at most 55 characters"},
		// instanceType becomes a nodeSelector; a different explicit value
		// for the same label is refused rather than one silently winning.
		{"instanceType against nodeSelector", func(e *v1alpha1.InferenceEndpointConfig) {
			e.Spec.InstanceType = "ml.g5.8xlarge"
			e.Spec.Worker.Scheduling = &v1alpha1.PodScheduling{NodeSelector: map[string]string{v1alpha1.InstanceTypeLabel: "ml.p4d.24xlarge"}}
		}, "instanceType and worker.scheduling.nodeSelector name different node.kubernetes.io/instance-type values"},
		{"instanceType not a label value", func(e *v1alpha1.InferenceEndpointConfig) { e.Spec.InstanceType = "ml g5" },
			"spec.instanceType in body should match"},
		{"worker resources twice", func(e *v1alpha1.InferenceEndpointConfig) {
			e.Spec.Worker.Resources = corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}}
			e.Spec.Worker.Scheduling = &v1alpha1.PodScheduling{Resources: &corev1.ResourceRequirements{}}
		}, "set worker.resources or worker.scheduling.resources, not both"},
		{"router resources twice", func(e *v1alpha1.InferenceEndpointConfig) {
			e.Spec.IntelligentRoutingSpec.RouterResources = &corev1.ResourceRequirements{}
			e.Spec.IntelligentRoutingSpec.RouterScheduling = &v1alpha1.PodScheduling{Resources: &corev1.ResourceRequirements{}}
		}, "set routerResources or routerScheduling.resources, not both"},
		{"empty runtimeClassName", func(e *v1alpha1.InferenceEndpointConfig) {
			e.Spec.Worker.Scheduling = &v1alpha1.PodScheduling{RuntimeClassName: ptr.To("")}
		}, "spec.worker.scheduling.runtimeClassName in body should be at least 1 chars long"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			iec := minimal(ns, fmt.Sprintf("bad%d", i))
			tc.edit(iec)
			err := c.Create(context.Background(), iec)
			if err == nil {
				t.Fatalf("accepted; want an error containing %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q, want it to contain %q", err, tc.want)
			}
		})
	}
}

// TestConditionsFollowReadiness sets the Deployments' status as their
// controller would and watches the endpoint's conditions follow.
func TestConditionsFollowReadiness(t *testing.T) {
	c := cluster(t)
	ns := namespace(t, c)
	iec := minimal(ns, "c")
	iec.Spec.Replicas = ptr.To[int32](2)
	iec.Spec.IntelligentRoutingSpec.Enabled = ptr.To(true)
	if err := c.Create(context.Background(), iec); err != nil {
		t.Fatal(err)
	}
	status := func(wantState string, want map[string]metav1.ConditionStatus) {
		t.Helper()
		eventually(t, "state "+wantState, func() error {
			var cur v1alpha1.InferenceEndpointConfig
			if err := c.Get(context.Background(), client.ObjectKeyFromObject(iec), &cur); err != nil {
				return err
			}
			if cur.Status.State != wantState {
				return fmt.Errorf("state %q, conditions %+v", cur.Status.State, cur.Status.Conditions)
			}
			for typ, s := range want {
				cond := meta.FindStatusCondition(cur.Status.Conditions, typ)
				if cond == nil || cond.Status != s || cond.Message == "" {
					return fmt.Errorf("condition %s = %+v, want %s with a message", typ, cond, s)
				}
			}
			return nil
		})
	}
	status(v1alpha1.StateProgressing, map[string]metav1.ConditionStatus{
		v1alpha1.ConditionWorkersReady: metav1.ConditionFalse, v1alpha1.ConditionRouterReady: metav1.ConditionFalse,
		v1alpha1.ConditionCacheReady: metav1.ConditionTrue, v1alpha1.ConditionReady: metav1.ConditionFalse,
	})
	setReady(t, c, ns, "c-worker", 1)
	status(v1alpha1.StateProgressing, map[string]metav1.ConditionStatus{v1alpha1.ConditionWorkersReady: metav1.ConditionFalse})
	setReady(t, c, ns, "c-worker", 2)
	status(v1alpha1.StateProgressing, map[string]metav1.ConditionStatus{
		v1alpha1.ConditionWorkersReady: metav1.ConditionTrue, v1alpha1.ConditionRouterReady: metav1.ConditionFalse,
	})
	setReady(t, c, ns, "c-router", 1)
	status(v1alpha1.StateComplete, map[string]metav1.ConditionStatus{v1alpha1.ConditionReady: metav1.ConditionTrue})
	for _, reason := range []string{"Created", v1alpha1.StateComplete} {
		eventually(t, reason+" event", func() error { return findEvent(c, ns, "c", reason) })
	}

	var cur v1alpha1.InferenceEndpointConfig
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(iec), &cur); err != nil {
		t.Fatal(err)
	}
	if cur.Status.URL != "http://c."+ns+".svc" || cur.Status.Workers != "2/2" || cur.Status.ReadyWorkers != 2 || cur.Status.DesiredWorkers != 2 {
		t.Errorf("status %+v", cur.Status)
	}
	if len(cur.Status.Endpoints) != 1 || cur.Status.Endpoints[0] != "http://c."+ns+".svc/v1/chat/completions" {
		t.Errorf("endpoints %q", cur.Status.Endpoints)
	}
}

// TestSamplesApply creates every manifest in config/samples, each in its
// own namespace: the anchor's examples reuse names (two are "demo"). The
// anchor's membrain sample asks for worker resources no pod may have: it
// is accepted, and reported instead of its workers (TestAnchorManifests
// checks how).
func TestSamplesApply(t *testing.T) {
	refused := map[string]bool{"anchor-s3-ir-l1-l2-tieredstorage.yaml": true}
	c := cluster(t)
	files, err := filepath.Glob(filepath.Join("..", "..", "config", "samples", "*.yaml"))
	if err != nil || len(files) < 5 {
		t.Fatalf("samples: %v %v", files, err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var iec v1alpha1.InferenceEndpointConfig
			if err := yaml.UnmarshalStrict(raw, &iec); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			ns := namespace(t, c)
			iec.Namespace = ns
			if err := c.Create(context.Background(), &iec); err != nil {
				t.Fatalf("%s rejected: %v", f, err)
			}
			if refused[filepath.Base(f)] {
				waitStatus(t, c, &iec, "Ready False InvalidWorkerResources", func(cur *v1alpha1.InferenceEndpointConfig) error {
					if cond := meta.FindStatusCondition(cur.Status.Conditions, v1alpha1.ConditionReady); cond == nil || cond.Reason != "InvalidWorkerResources" {
						return fmt.Errorf("Ready %+v", cond)
					}
					return nil
				})
				return
			}
			get(t, c, ns, iec.Name+"-worker", &appsv1.Deployment{})
		})
	}
}

// TestForeignObjectFailsWithAdvice pre-creates a Deployment with the worker
// Deployment's name and another selector (immutable): the endpoint reports
// DeploymentFailed with a message that says what to do, and a Warning event.
func TestForeignObjectFailsWithAdvice(t *testing.T) {
	c := cluster(t)
	ns := namespace(t, c)
	labels := map[string]string{"app": "mine"}
	foreign := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "f-worker"},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
			},
		},
	}
	if err := c.Create(context.Background(), foreign); err != nil {
		t.Fatal(err)
	}
	iec := minimal(ns, "f")
	if err := c.Create(context.Background(), iec); err != nil {
		t.Fatal(err)
	}
	eventually(t, "DeploymentFailed with advice", func() error {
		var cur v1alpha1.InferenceEndpointConfig
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(iec), &cur); err != nil {
			return err
		}
		cond := meta.FindStatusCondition(cur.Status.Conditions, v1alpha1.ConditionReady)
		if cur.Status.State != v1alpha1.StateFailed || cond == nil || cond.Reason != "ReconcileError" ||
			!strings.Contains(cond.Message, "Deployment f-worker already exists and was not created by this endpoint") {
			return fmt.Errorf("state %q, Ready %+v", cur.Status.State, cond)
		}
		return nil
	})
	eventually(t, "Warning event", func() error { return findEvent(c, ns, "f", "ReconcileError") })
}

// findEvent reports whether an event with reason was recorded about the
// endpoint name.
func findEvent(c client.Client, ns, name, reason string) error {
	var evs eventsv1.EventList
	if err := c.List(context.Background(), &evs, client.InNamespace(ns)); err != nil {
		return err
	}
	for _, e := range evs.Items {
		if e.Regarding.Name == name && e.Reason == reason {
			return nil
		}
	}
	return fmt.Errorf("no %s event about %s among %d", reason, name, len(evs.Items))
}
