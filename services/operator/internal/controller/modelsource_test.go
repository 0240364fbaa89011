package controller

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/warmpath/warmpath/services/operator/api/v1alpha1"
)

func sourceEndpoint(src v1alpha1.ModelSourceConfig) *v1alpha1.InferenceEndpointConfig {
	return &v1alpha1.InferenceEndpointConfig{
		ObjectMeta: metav1.ObjectMeta{Name: "m", Namespace: "ns"},
		Spec: v1alpha1.InferenceEndpointConfigSpec{
			ModelName:         "llama",
			ModelSourceConfig: src,
			Worker:            v1alpha1.WorkerSpec{Image: "vllm", ModelVolumeMount: &v1alpha1.ModelVolumeMount{Name: "model-weights", MountPath: "/opt/ml/model"}},
		},
	}
}

// TestModelVolume: each model source becomes the volume at
// worker.modelVolumeMount, the worker's mount of it, and (s3) the init
// container that fills it; and vLLM is pointed where the model lands.
func TestModelVolume(t *testing.T) {
	o := Options{ModelFetchImage: "fetch:test"}
	s3 := &v1alpha1.S3Storage{BucketName: "models", Region: "us-west-2"}
	tests := []struct {
		name      string
		src       v1alpha1.ModelSourceConfig
		simulate  bool
		volume    corev1.VolumeSource
		mount     corev1.VolumeMount
		initArgs  string // "" for no init container
		initEnv   []string
		modelPath string
	}{
		{"kubernetesVolume: the claim, read-only, model below the mount",
			v1alpha1.ModelSourceConfig{ModelSourceType: "kubernetesVolume", ModelLocation: "llama", KubernetesVolume: &v1alpha1.KubernetesVolume{ClaimName: "weights"}},
			false, corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "weights", ReadOnly: true}},
			corev1.VolumeMount{Name: "model-weights", MountPath: "/opt/ml/model", ReadOnly: true}, "", nil, "/opt/ml/model/llama"},
		{"fsx: the claim named after the file system, modelLocation as subPath",
			v1alpha1.ModelSourceConfig{ModelSourceType: "fsx", ModelLocation: "deepseek15b", PrefetchEnabled: true,
				FSxStorage: &v1alpha1.FSxStorage{FileSystemID: "fs-0123456789abcdef0", DNSName: "fs.example", MountName: "abcd"}},
			false, corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "fs-0123456789abcdef0", ReadOnly: true}},
			corev1.VolumeMount{Name: "model-weights", MountPath: "/opt/ml/model", ReadOnly: true, SubPath: "deepseek15b"}, "", nil, "/opt/ml/model"},
		{"fsx: an explicit claim",
			v1alpha1.ModelSourceConfig{ModelSourceType: "fsx", FSxStorage: &v1alpha1.FSxStorage{FileSystemID: "fs-1", ClaimName: "lustre"}},
			false, corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "lustre", ReadOnly: true}},
			corev1.VolumeMount{Name: "model-weights", MountPath: "/opt/ml/model", ReadOnly: true}, "", nil, "/opt/ml/model"},
		{"huggingface prefetched: the Hub cache in RAM",
			v1alpha1.ModelSourceConfig{ModelSourceType: "huggingface", PrefetchEnabled: true, HuggingFaceModel: &v1alpha1.HuggingFaceModel{ModelID: "org/m"}},
			false, corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}},
			corev1.VolumeMount{Name: "model-weights", MountPath: "/opt/ml/model"}, "", nil, "/opt/ml/model"},
		{"s3: a disk emptyDir filled by model-fetch, model at the mount path",
			v1alpha1.ModelSourceConfig{ModelSourceType: "s3", ModelLocation: "models/llama", S3Storage: s3},
			false, corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}},
			corev1.VolumeMount{Name: "model-weights", MountPath: "/opt/ml/model"},
			"--bucket models --prefix models/llama --dest /opt/ml/model --region us-west-2", nil, "/opt/ml/model"},
		{"s3 prefetched, S3-compatible, credentials from a Secret",
			v1alpha1.ModelSourceConfig{ModelSourceType: "s3", ModelLocation: "llama", PrefetchEnabled: true, S3Storage: &v1alpha1.S3Storage{
				BucketName: "models", EndpointURL: "http://minio.storage:9000", CredentialsSecretRef: &corev1.LocalObjectReference{Name: "s3-creds"}}},
			false, corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}},
			corev1.VolumeMount{Name: "model-weights", MountPath: "/opt/ml/model"},
			"--bucket models --prefix llama --dest /opt/ml/model --endpoint-url http://minio.storage:9000 --path-style",
			[]string{"AWS_ACCESS_KEY_ID=s3-creds/AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY=s3-creds/AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN=s3-creds/AWS_SESSION_TOKEN?"},
			"/opt/ml/model"},
		{"s3 simulated: no fetch (vllm-sim loads no weights)",
			v1alpha1.ModelSourceConfig{ModelSourceType: "s3", S3Storage: s3},
			true, corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}},
			corev1.VolumeMount{Name: "model-weights", MountPath: "/opt/ml/model"}, "", nil, "/opt/ml/model"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			iec := sourceEndpoint(tt.src)
			iec.Spec.Simulate = tt.simulate
			p := modelVolume(iec, o)
			if len(p.Volumes) != 1 || p.Volumes[0].Name != "model-weights" || !apiequality.Semantic.DeepEqual(p.Volumes[0].VolumeSource, tt.volume) {
				t.Errorf("volumes %+v, want model-weights %+v", p.Volumes, tt.volume)
			}
			if len(p.Mounts) != 1 || !apiequality.Semantic.DeepEqual(p.Mounts[0], tt.mount) {
				t.Errorf("mounts %+v, want %+v", p.Mounts, tt.mount)
			}
			if tt.initArgs == "" {
				if len(p.InitContainers) != 0 {
					t.Errorf("init containers %+v, want none", p.InitContainers)
				}
			} else {
				if len(p.InitContainers) != 1 {
					t.Fatalf("init containers %+v, want model-fetch", p.InitContainers)
				}
				c := p.InitContainers[0]
				if c.Name != modelFetchContainer || c.Image != "fetch:test" || strings.Join(c.Args, " ") != tt.initArgs {
					t.Errorf("init container %s %s %q, want model-fetch fetch:test %q", c.Name, c.Image, c.Args, tt.initArgs)
				}
				if len(c.VolumeMounts) != 1 || c.VolumeMounts[0].Name != "model-weights" || c.VolumeMounts[0].MountPath != "/opt/ml/model" || c.VolumeMounts[0].ReadOnly {
					t.Errorf("init container mounts %+v, want model-weights at /opt/ml/model, writable", c.VolumeMounts)
				}
				var env []string
				for _, e := range c.Env {
					ref := e.ValueFrom.SecretKeyRef
					s := e.Name + "=" + ref.Name + "/" + ref.Key
					if ref.Optional != nil && *ref.Optional {
						s += "?"
					}
					env = append(env, s)
				}
				if strings.Join(env, " ") != strings.Join(tt.initEnv, " ") {
					t.Errorf("init env %q, want %q", env, tt.initEnv)
				}
				if _, limited := c.Resources.Limits[corev1.ResourceMemory]; limited {
					t.Errorf("init container has a memory limit %v: a prefetch into tmpfs is charged to it", c.Resources.Limits)
				}
			}
			if got := modelPath(iec); got != tt.modelPath {
				t.Errorf("model path %s, want %s", got, tt.modelPath)
			}
		})
	}
}

func TestIgnoredFields(t *testing.T) {
	tests := []struct {
		name string
		edit func(*v1alpha1.InferenceEndpointConfigSpec)
		want []string
	}{
		{"nothing cloud-only", func(*v1alpha1.InferenceEndpointConfigSpec) {}, nil},
		{"endpointName and both tlsConfig fields", func(s *v1alpha1.InferenceEndpointConfigSpec) {
			s.EndpointName = "sme"
			s.TLSConfig = &v1alpha1.TLSConfig{TLSCertificateOutputS3Uri: "s3://b/certs", CustomCertificateConfig: &v1alpha1.CustomCertificateConfig{ACMArn: "arn", DomainName: "x.example"}}
		}, []string{"spec.endpointName", "spec.tlsConfig.tlsCertificateOutputS3Uri", "spec.tlsConfig.customCertificateConfig"}},
		{"an empty tlsConfig sets nothing", func(s *v1alpha1.InferenceEndpointConfigSpec) { s.TLSConfig = &v1alpha1.TLSConfig{} }, nil},
		{"fsx placement fields and prefetch", func(s *v1alpha1.InferenceEndpointConfigSpec) {
			s.ModelSourceConfig = v1alpha1.ModelSourceConfig{ModelSourceType: "fsx", PrefetchEnabled: true,
				FSxStorage: &v1alpha1.FSxStorage{FileSystemID: "fs-1", DNSName: "d", MountName: "m"}}
		}, []string{"spec.modelSourceConfig.fsxStorage.dnsName", "spec.modelSourceConfig.fsxStorage.mountName", "spec.modelSourceConfig.prefetchEnabled"}},
		{"prefetch honoured for s3", func(s *v1alpha1.InferenceEndpointConfigSpec) {
			s.ModelSourceConfig = v1alpha1.ModelSourceConfig{ModelSourceType: "s3", PrefetchEnabled: true, S3Storage: &v1alpha1.S3Storage{BucketName: "b"}}
		}, nil},
		{"prefetch ignored for a claim", func(s *v1alpha1.InferenceEndpointConfigSpec) {
			s.ModelSourceConfig = v1alpha1.ModelSourceConfig{ModelSourceType: "kubernetesVolume", PrefetchEnabled: true, KubernetesVolume: &v1alpha1.KubernetesVolume{ClaimName: "c"}}
		}, []string{"spec.modelSourceConfig.prefetchEnabled"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			iec := sourceEndpoint(v1alpha1.ModelSourceConfig{ModelSourceType: "huggingface", HuggingFaceModel: &v1alpha1.HuggingFaceModel{ModelID: "org/m"}})
			tt.edit(&iec.Spec)
			var got []string
			for _, f := range ignoredFields(iec) {
				got = append(got, f.path)
			}
			if strings.Join(got, " ") != strings.Join(tt.want, " ") {
				t.Errorf("ignored %q, want %q", got, tt.want)
			}
			setIgnoredFieldsCondition(iec)
			c := meta.FindStatusCondition(iec.Status.Conditions, v1alpha1.ConditionIgnoredFields)
			switch {
			case len(tt.want) == 0 && c != nil:
				t.Errorf("condition %+v, want none", c)
			case len(tt.want) > 0 && (c == nil || c.Status != metav1.ConditionTrue || c.Reason != "CloudOnlyFields"):
				t.Errorf("condition %+v, want True CloudOnlyFields", c)
			case len(tt.want) > 0:
				for _, p := range tt.want {
					if !strings.Contains(c.Message, p+" (") {
						t.Errorf("message %q does not name %s with its reason", c.Message, p)
					}
				}
			}
		})
	}
}

// TestSimulatedModelFetch: a simulated worker with an s3 source fetches
// its model only when the simulate-model-fetch annotation asks, and then
// vllm-sim is given the fetched directory (which it checks as vLLM would)
// in place of the model's name.
func TestSimulatedModelFetch(t *testing.T) {
	o := Options{ModelFetchImage: "fetch:test", SimulatorImage: "sim:test"}
	src := v1alpha1.ModelSourceConfig{ModelSourceType: "s3", ModelLocation: "llama", S3Storage: &v1alpha1.S3Storage{BucketName: "models"}}
	tests := []struct {
		name      string
		annotate  bool
		wantFetch bool
		wantModel string
	}{
		{"simulated: nothing fetched, the model by name", false, false, "m"},
		{"simulated with simulate-model-fetch: fetched, the directory", true, true, "/opt/ml/model"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			iec := sourceEndpoint(src)
			iec.Spec.Simulate = true
			iec.Spec.ModelName = "m"
			if tt.annotate {
				iec.Annotations = map[string]string{v1alpha1.SimulateModelFetchAnnotation: "true"}
			}
			if got := len(modelVolume(iec, o).InitContainers) == 1; got != tt.wantFetch {
				t.Errorf("model-fetch init container: %v, want %v", got, tt.wantFetch)
			}
			args := planWorker(iec, o).Args
			i := slices.Index(args, "--model")
			if i < 0 || i+1 >= len(args) || args[i+1] != tt.wantModel {
				t.Errorf("vllm-sim args %q, want --model %s", args, tt.wantModel)
			}
		})
	}
}
