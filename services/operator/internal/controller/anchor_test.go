package controller_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	sigsyaml "sigs.k8s.io/yaml"

	v1alpha1 "github.com/warmpath/warmpath/services/operator/api/v1alpha1"
	"github.com/warmpath/warmpath/services/operator/internal/controller"
)

// TestAnchorManifests applies the managed offering's published example
// manifests (config/samples/anchor-*.yaml, each naming its source), with
// only their apiVersion changed, to the API server as kubectl does (strict
// field validation: an unknown field is an error, not silently pruned), and
// checks what the operator makes of them.
func TestAnchorManifests(t *testing.T) {
	c := cluster(t)
	tests := []struct {
		file         string
		instanceType string
		fetchArgs    string // "" for no model-fetch init container
		memory       bool   // the model volume in RAM (prefetchEnabled)
		routed       bool
		ignored      []string
		// replicas is the worker Deployment's; 0 for the default, 1.
		replicas int32
		// args are the worker's first args: the manifest's own, the
		// operator's follow.
		args []string
		// check, if set, checks what the sample newly exercises.
		check func(t *testing.T, c client.Client, iec *v1alpha1.InferenceEndpointConfig, vllm corev1.Container)
		// refused, if set, are what the Ready condition (reason
		// InvalidWorkerResources) must say while the API server refuses
		// the worker Deployment the manifest asks for; fix is the user's
		// edit after which the rest of the row applies.
		refused []string
		fix     func(*v1alpha1.InferenceEndpointConfig)
	}{
		{file: "anchor-example.yaml"},
		{file: "anchor-blog-s3.yaml", instanceType: "ml.g5.24xlarge", routed: true,
			fetchArgs: "--bucket my-model-bucket --prefix models/Llama-3.1-8B-Instruct --dest /opt/ml/model --region us-west-2",
			ignored:   []string{"spec.tlsConfig.tlsCertificateOutputS3Uri"},
			args:      []string{"--model", "/opt/ml/model", "--max-model-len", "20000"}},
		{file: "anchor-s3-prefetch.yaml", instanceType: "ml.g5.8xlarge", memory: true,
			fetchArgs: "--bucket model-data-578732889311 --prefix deepseek15b --dest /opt/ml/model --region us-west-2",
			ignored:   []string{"spec.endpointName"}},
		{file: "anchor-intelligent-routing.yaml", instanceType: "ml.g5.8xlarge", routed: true,
			fetchArgs: "--bucket model-storage-bucket --prefix llama31_8b --dest /opt/ml/model --region us-west-2",
			ignored:   []string{"spec.endpointName", "spec.tlsConfig.tlsCertificateOutputS3Uri"},
			args:      []string{"/opt/ml/model", "--max-model-len", "4096"}},
		{file: "anchor-s3-ir-l1.yaml", instanceType: "ml.g5.48xlarge", routed: true, replicas: 3,
			fetchArgs: "--bucket my-model-bucket --prefix models/Llama-3.1-8B-Instruct --dest /opt/ml/model --region us-east-2",
			ignored:   []string{"spec.tlsConfig.tlsCertificateOutputS3Uri"},
			args:      []string{"/opt/ml/model", "--max-model-len", "12000"},
			check: func(t *testing.T, c client.Client, iec *v1alpha1.InferenceEndpointConfig, vllm corev1.Container) {
				checkSageMakerEnv(t, vllm)
				checkCache(t, c, iec, vllm, []string{"L1Only"}, "", "")
			}},
		{file: "anchor-kv-cache-l1-l2-redis.yaml", instanceType: "ml.g5.8xlarge",
			fetchArgs: "--bucket model-storage-bucket --prefix llama31_8b --dest /opt/ml/model --region us-west-2",
			ignored:   []string{"spec.endpointName", "spec.tlsConfig.tlsCertificateOutputS3Uri"},
			args:      []string{"/opt/ml/model", "--max-model-len", "4096"},
			check: func(t *testing.T, c client.Client, iec *v1alpha1.InferenceEndpointConfig, vllm corev1.Container) {
				url := "redis://redis.ns-team-a.svc.cluster.local:6379"
				checkCache(t, c, iec, vllm, []string{"RedisL2"}, url, "LMCache L2 in Redis at "+url)
			}},
		// Its workers request more than they limit (memory 512Gi against
		// 100Gi, nvidia.com/gpu 4 against 8), which no pod may.
		{file: "anchor-s3-ir-l1-l2-tieredstorage.yaml", instanceType: "ml.p5.48xlarge", routed: true, replicas: 7,
			fetchArgs: "--bucket my-model-bucket --prefix models/Llama-3.1-70B-Instruct --dest /opt/ml/model --region us-east-2",
			ignored:   []string{"spec.tlsConfig.tlsCertificateOutputS3Uri"},
			args:      []string{"/opt/ml/model", "--max-model-len", "12000"},
			refused: []string{
				"spec.worker.resources",
				`spec.template.spec.containers[0].resources.requests: Invalid value: "512Gi": must be less than or equal to memory limit of 100Gi`,
				`must be equal to nvidia.com/gpu limit of 8`,
			},
			fix: func(iec *v1alpha1.InferenceEndpointConfig) {
				r := &iec.Spec.Worker.Resources
				r.Limits[corev1.ResourceMemory] = resource.MustParse("512Gi")
				r.Requests["nvidia.com/gpu"] = resource.MustParse("8")
			},
			check: func(t *testing.T, c client.Client, iec *v1alpha1.InferenceEndpointConfig, vllm corev1.Container) {
				checkSageMakerEnv(t, vllm)
				// Each worker talks to the cache server on its own node.
				if i := slices.IndexFunc(vllm.Env, func(e corev1.EnvVar) bool { return e.Name == "HOST_IP" }); i < 0 ||
					vllm.Env[i].ValueFrom == nil || vllm.Env[i].ValueFrom.FieldRef == nil || vllm.Env[i].ValueFrom.FieldRef.FieldPath != "status.hostIP" {
					t.Errorf("worker env %+v lacks HOST_IP from status.hostIP", vllm.Env)
				}
				url := fmt.Sprintf("lm://$(HOST_IP):%d", testOptions.CacheServerPort)
				// The cache server DaemonSet (cache/cacheserver) is
				// TestCacheServerReadiness's, in whatever state it left it.
				checkCache(t, c, iec, vllm, []string{"CacheServerMissing", "CacheServerNotReady", "TieredStorageL2"}, url, "")
			}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			ns := namespace(t, c)
			raw, err := os.ReadFile(filepath.Join("..", "..", "config", "samples", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			var u unstructured.Unstructured
			if err := sigsyaml.Unmarshal(raw, &u.Object); err != nil {
				t.Fatal(err)
			}
			if u.GetAPIVersion() != v1alpha1.GroupVersion.String() {
				t.Fatalf("apiVersion %s, want %s", u.GetAPIVersion(), v1alpha1.GroupVersion)
			}
			u.SetNamespace(ns)
			if err := c.Create(context.Background(), &u, client.FieldValidation(metav1.FieldValidationStrict)); err != nil {
				t.Fatalf("%s rejected: %v", tt.file, err)
			}
			name := u.GetName()
			if tt.refused != nil {
				checkRefused(t, c, ns, name, tt.refused, tt.ignored)
				editSpec(t, c, &v1alpha1.InferenceEndpointConfig{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}, tt.fix)
			}

			var d appsv1.Deployment
			get(t, c, ns, name+"-worker", &d)
			pod := d.Spec.Template.Spec
			if got := pod.NodeSelector[v1alpha1.InstanceTypeLabel]; got != tt.instanceType {
				t.Errorf("nodeSelector %s=%q, want %q", v1alpha1.InstanceTypeLabel, got, tt.instanceType)
			}
			checkModelFetch(t, pod, tt.fetchArgs, tt.memory)
			if got, want := ptr.Deref(d.Spec.Replicas, -1), max(tt.replicas, 1); got != want {
				t.Errorf("worker replicas %d, want %d", got, want)
			}
			if len(tt.args) > 0 && !slices.Equal(pod.Containers[0].Args[:min(len(tt.args), len(pod.Containers[0].Args))], tt.args) {
				t.Errorf("worker args %q, want them to start with %q", pod.Containers[0].Args, tt.args)
			}
			// A positional model (vllm serve <model>) is the model: vLLM
			// is not given --model as well, which some vLLM releases
			// refuse next to it ("provide the model as a positional
			// argument instead of via the --model option") and later
			// ones warn about.
			if len(tt.args) > 0 && !strings.HasPrefix(tt.args[0], "-") && slices.ContainsFunc(pod.Containers[0].Args, func(a string) bool {
				return a == "--model" || strings.HasPrefix(a, "--model=")
			}) {
				t.Errorf("worker args %q name the model twice, positionally and by --model", pod.Containers[0].Args)
			}
			get(t, c, ns, name, &corev1.Service{})
			get(t, c, ns, name+"-workers", &corev1.Service{})
			if tt.routed {
				get(t, c, ns, name+"-router", &appsv1.Deployment{})
			}

			iec := &v1alpha1.InferenceEndpointConfig{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
			waitStatus(t, c, iec, "IgnoredFields condition", func(cur *v1alpha1.InferenceEndpointConfig) error {
				if cur.Status.ObservedGeneration != cur.Generation {
					return fmt.Errorf("status of generation %d, want %d", cur.Status.ObservedGeneration, cur.Generation)
				}
				cond := meta.FindStatusCondition(cur.Status.Conditions, v1alpha1.ConditionIgnoredFields)
				if len(tt.ignored) == 0 {
					if cond != nil {
						return fmt.Errorf("condition %+v, want none", cond)
					}
					return nil
				}
				if cond == nil || cond.Status != metav1.ConditionTrue || cond.Reason != "CloudOnlyFields" {
					return fmt.Errorf("condition %+v, want True CloudOnlyFields", cond)
				}
				for _, p := range tt.ignored {
					if !strings.Contains(cond.Message, p+" (") {
						return fmt.Errorf("message %q does not name %s", cond.Message, p)
					}
				}
				if r := meta.FindStatusCondition(cur.Status.Conditions, v1alpha1.ConditionReady); r == nil || r.Reason == reasonInvalidWorkerResources {
					return fmt.Errorf("Ready %+v", r)
				}
				// An ignored field never holds the endpoint back.
				if r := meta.FindStatusCondition(cur.Status.Conditions, v1alpha1.ConditionReady); r != nil && strings.Contains(r.Message, v1alpha1.ConditionIgnoredFields) {
					return fmt.Errorf("Ready waits for IgnoredFields: %s", r.Message)
				}
				return nil
			})
			if tt.check != nil {
				tt.check(t, c, iec, pod.Containers[0])
			}
		})
	}
}

const reasonInvalidWorkerResources = "InvalidWorkerResources"

// checkRefused checks an endpoint whose worker Deployment the API server
// refuses for its resources: the endpoint itself is accepted, no worker
// Deployment exists, and the status says why at once — Ready and
// WorkersReady False, reason InvalidWorkerResources, with the API
// server's message (each of want), the state DeploymentFailed, the
// ignored fields still reported — with a Warning event.
func checkRefused(t *testing.T, c client.Client, ns, name string, want, ignored []string) {
	t.Helper()
	iec := &v1alpha1.InferenceEndpointConfig{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	waitStatus(t, c, iec, "Ready False "+reasonInvalidWorkerResources, func(cur *v1alpha1.InferenceEndpointConfig) error {
		if cur.Status.ObservedGeneration != cur.Generation || cur.Status.State != v1alpha1.StateFailed {
			return fmt.Errorf("status of generation %d (want %d), state %q, Ready %+v", cur.Status.ObservedGeneration, cur.Generation, cur.Status.State,
				meta.FindStatusCondition(cur.Status.Conditions, v1alpha1.ConditionReady))
		}
		for _, typ := range []string{v1alpha1.ConditionReady, v1alpha1.ConditionWorkersReady} {
			cond := meta.FindStatusCondition(cur.Status.Conditions, typ)
			if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != reasonInvalidWorkerResources || cond.ObservedGeneration != cur.Generation {
				return fmt.Errorf("%s %+v, want False %s", typ, cond, reasonInvalidWorkerResources)
			}
			for _, w := range want {
				if !strings.Contains(cond.Message, w) {
					return fmt.Errorf("%s message %q does not say %q", typ, cond.Message, w)
				}
			}
		}
		cond := meta.FindStatusCondition(cur.Status.Conditions, v1alpha1.ConditionIgnoredFields)
		for _, p := range ignored {
			if cond == nil || !strings.Contains(cond.Message, p+" (") {
				return fmt.Errorf("IgnoredFields %+v does not name %s", cond, p)
			}
		}
		return nil
	})
	err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name + "-worker"}, &appsv1.Deployment{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("worker Deployment: %v, want none", err)
	}
	eventually(t, "Warning event", func() error { return findEvent(c, ns, name, reasonInvalidWorkerResources) })
}

// envOf is the value of the container's variable name and whether it is
// set; it fails the test if it is set more than once.
func envOf(t *testing.T, ctr corev1.Container, name string) (string, bool) {
	t.Helper()
	var vals []string
	for _, e := range ctr.Env {
		if e.Name == name {
			vals = append(vals, e.Value)
		}
	}
	if len(vals) > 1 {
		t.Errorf("%s set %d times: %q", name, len(vals), vals)
	}
	if len(vals) == 0 {
		return "", false
	}
	return vals[0], true
}

// checkSageMakerEnv checks the worker environment of the managed
// offering's intelligent-routing samples: their SageMaker variables are
// passed as they are, except PYTHONHASHSEED ("123"), which the operator
// sets alike on every worker (HashSeed), as routing and a shared L2 need.
func checkSageMakerEnv(t *testing.T, vllm corev1.Container) {
	t.Helper()
	if v, _ := envOf(t, vllm, "PYTHONHASHSEED"); v != controller.HashSeed {
		t.Errorf("PYTHONHASHSEED %q, want the operator's %q", v, controller.HashSeed)
	}
	for name, want := range map[string]string{
		"OPTION_ROLLING_BATCH": "vllm", "SERVING_CHUNKED_READ_TIMEOUT": "480", "DJL_OFFLINE": "true", "NUM_SHARD": "1",
		"SAGEMAKER_PROGRAM": "inference.py", "SAGEMAKER_SUBMIT_DIRECTORY": "/opt/ml/model/code", "MODEL_CACHE_ROOT": "/opt/ml/model",
		"SAGEMAKER_MODEL_SERVER_WORKERS": "1", "SAGEMAKER_MODEL_SERVER_TIMEOUT": "3600", "OPTION_TRUST_REMOTE_CODE": "true",
		"OPTION_ENABLE_REASONING": "true", "OPTION_REASONING_PARSER": "deepseek_r1", "SAGEMAKER_CONTAINER_LOG_LEVEL": "20", "SAGEMAKER_ENV": "1",
	} {
		if v, ok := envOf(t, vllm, name); !ok || v != want {
			t.Errorf("%s=%q (set: %v), want %q", name, v, ok, want)
		}
	}
}

// checkCache checks the worker's LMCache wiring (L1 in CPU RAM, and the
// L2 at remoteURL, none if "") and the CacheReady condition: one of
// reasons and, if message is not "", its message.
func checkCache(t *testing.T, c client.Client, iec *v1alpha1.InferenceEndpointConfig, vllm corev1.Container, reasons []string, remoteURL, message string) {
	t.Helper()
	if v, _ := envOf(t, vllm, "LMCACHE_LOCAL_CPU"); v != "true" {
		t.Errorf("LMCACHE_LOCAL_CPU %q, want true", v)
	}
	if !slices.Contains(vllm.Args, "--kv-transfer-config") {
		t.Errorf("worker args %q lack --kv-transfer-config (LMCache connector)", vllm.Args)
	}
	url, ok := envOf(t, vllm, "LMCACHE_REMOTE_URL")
	if url != remoteURL {
		t.Errorf("LMCACHE_REMOTE_URL %q (set: %v), want %q", url, ok, remoteURL)
	}
	if serde, _ := envOf(t, vllm, "LMCACHE_REMOTE_SERDE"); remoteURL != "" && serde != "naive" {
		t.Errorf("LMCACHE_REMOTE_SERDE %q, want naive", serde)
	}
	waitStatus(t, c, iec, "CacheReady "+strings.Join(reasons, " or "), func(cur *v1alpha1.InferenceEndpointConfig) error {
		cond := meta.FindStatusCondition(cur.Status.Conditions, v1alpha1.ConditionCacheReady)
		if cond == nil || cond.ObservedGeneration != cur.Generation || !slices.Contains(reasons, cond.Reason) || (message != "" && cond.Message != message) {
			return fmt.Errorf("CacheReady %+v, want reason %s message %q", cond, strings.Join(reasons, " or "), message)
		}
		return nil
	})
}

// checkModelFetch checks the worker pod's model volume and, for an s3
// source, the init container that fills it before vLLM starts.
func checkModelFetch(t *testing.T, pod corev1.PodSpec, wantArgs string, memory bool) {
	t.Helper()
	i := slices.IndexFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == "model-weights" })
	if i < 0 {
		t.Fatalf("no model-weights volume in %+v", pod.Volumes)
	}
	if wantArgs == "" {
		if len(pod.InitContainers) != 0 {
			t.Errorf("init containers %+v, want none", pod.InitContainers)
		}
		return
	}
	ed := pod.Volumes[i].EmptyDir
	if ed == nil || (ed.Medium == corev1.StorageMediumMemory) != memory {
		t.Errorf("model volume %+v, want an emptyDir (in memory: %v)", pod.Volumes[i].VolumeSource, memory)
	}
	if len(pod.InitContainers) != 1 {
		t.Fatalf("init containers %+v, want model-fetch", pod.InitContainers)
	}
	ic := pod.InitContainers[0]
	if ic.Name != "model-fetch" || ic.Image != testOptions.ModelFetchImage || strings.Join(ic.Args, " ") != wantArgs {
		t.Errorf("init container %s %s %q, want model-fetch %s %q", ic.Name, ic.Image, ic.Args, testOptions.ModelFetchImage, wantArgs)
	}
	if len(ic.VolumeMounts) != 1 || ic.VolumeMounts[0].Name != "model-weights" || ic.VolumeMounts[0].MountPath != "/opt/ml/model" {
		t.Errorf("init container mounts %+v", ic.VolumeMounts)
	}
	vllm := pod.Containers[0]
	if !slices.ContainsFunc(vllm.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "model-weights" && m.MountPath == "/opt/ml/model" }) {
		t.Errorf("worker mounts %+v lack model-weights at /opt/ml/model", vllm.VolumeMounts)
	}
	if a := strings.Join(vllm.Args, " "); !strings.Contains(a, "--model /opt/ml/model ") && !strings.HasPrefix(a, "/opt/ml/model ") {
		t.Errorf("worker args %q do not point vLLM at /opt/ml/model", a)
	}
}
