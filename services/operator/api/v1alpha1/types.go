package v1alpha1

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ModelSourceType is where a model's weights come from.
// +kubebuilder:validation:Enum=huggingface;kubernetesVolume;s3;fsx
type ModelSourceType string

// Model source types.
const (
	ModelSourceHuggingFace      ModelSourceType = "huggingface"
	ModelSourceKubernetesVolume ModelSourceType = "kubernetesVolume"
	ModelSourceS3               ModelSourceType = "s3"
	ModelSourceFSx              ModelSourceType = "fsx"
)

// L2Backend is the kind of the workers' shared L2 cache. The API accepts
// it in any letter case, as the managed offering does, so it has no Enum
// but a rule on the field; compare through Lower.
type L2Backend string

// L2 cache backends, in lower case.
const (
	L2BackendTieredStorage L2Backend = "tieredstorage"
	L2BackendRedis         L2Backend = "redis"
)

// Lower is b in lower case, the form the constants are in.
func (b L2Backend) Lower() L2Backend { return L2Backend(strings.ToLower(string(b))) }

// RoutingStrategy names the router's strategy (its --strategy).
// +kubebuilder:validation:Enum=prefixaware;kvaware;session;roundrobin
type RoutingStrategy string

// Routing strategies.
const (
	StrategyPrefixAware RoutingStrategy = "prefixaware"
	StrategyKVAware     RoutingStrategy = "kvaware"
	StrategySession     RoutingStrategy = "session"
	StrategyRoundRobin  RoutingStrategy = "roundrobin"
)

// RemoteSerde is the encoding of values in the L2 (LMCache remote_serde).
// +kubebuilder:validation:Enum=naive;cachegen
type RemoteSerde string

// L2 value encodings.
const (
	RemoteSerdeNaive    RemoteSerde = "naive"
	RemoteSerdeCacheGen RemoteSerde = "cachegen"
)

// SimulateAnnotation set to "true" runs vllm-sim in place of vLLM, like
// spec.simulate, so a manifest written for GPUs can be tried on a CPU-only
// cluster without editing its spec.
const SimulateAnnotation = "inference.warmpath.io/simulate"

// SimulateModelFetchAnnotation set to "true" on a simulated endpoint with an
// s3 model source keeps the model-fetch init container a real worker gets,
// and points vllm-sim at the fetched directory, which it checks as vLLM
// would (its config.json must be there): the fetch runs in the pod for
// real. Without it a simulated worker fetches nothing, so a GPU manifest
// can be tried where its bucket cannot be reached.
const SimulateModelFetchAnnotation = "inference.warmpath.io/simulate-model-fetch"

// MaxNameLength bounds metadata.name so that every child name the operator
// derives (the longest, <name>-workers, adds 8) is a DNS label of at most
// 63 characters, as a Service name must be. The CRD's CEL rule on
// metadata.name repeats the number (markers cannot refer to constants);
// TestInvalidSpecsRejected holds the two together.
const MaxNameLength = 55

// InferenceEndpointConfigSpec is the desired endpoint: a model served by
// vLLM+LMCache workers, optionally behind the warmpath router.
//
// +kubebuilder:validation:XValidation:rule="!(self.modelSourceConfig.modelSourceType in ['kubernetesVolume', 's3', 'fsx']) || has(self.worker.modelVolumeMount)",message="modelSourceConfig.modelSourceType kubernetesVolume, s3 and fsx need worker.modelVolumeMount (where the model volume is mounted in the worker)"
// +kubebuilder:validation:XValidation:rule="!has(self.autoScalingSpec) || !has(self.autoScalingSpec.targets) || !has(self.autoScalingSpec.targets.routerTTFTMilliseconds) || (has(self.intelligentRoutingSpec.enabled) && self.intelligentRoutingSpec.enabled)",message="autoScalingSpec.targets.routerTTFTMilliseconds needs intelligentRoutingSpec.enabled: the router measures the TTFT it targets"
// +kubebuilder:validation:XValidation:rule="!has(self.instanceType) || !has(self.worker.scheduling) || !has(self.worker.scheduling.nodeSelector) || !('node.kubernetes.io/instance-type' in self.worker.scheduling.nodeSelector) || self.worker.scheduling.nodeSelector['node.kubernetes.io/instance-type'] == self.instanceType",message="instanceType and worker.scheduling.nodeSelector name different node.kubernetes.io/instance-type values: set one of them"
type InferenceEndpointConfigSpec struct {
	// ModelName is the name clients send as "model".
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	ModelName string `json:"modelName"`

	// Replicas is the number of workers.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`

	// AutoScalingSpec scales the workers on load, as the managed offering's
	// field of the same name does: a KEDA ScaledObject where KEDA's CRDs are
	// installed, an autoscaling/v2 HorizontalPodAutoscaler otherwise. While
	// it is set the operator does not set the worker Deployment's replicas
	// (the autoscaler does) and spec.replicas is not applied; removing it
	// hands the count back to spec.replicas.
	// +optional
	AutoScalingSpec *AutoScalingSpec `json:"autoScalingSpec,omitempty"`

	// InstanceType is the node instance type the workers run on, as the
	// managed offering names it (e.g. ml.g5.8xlarge, or a cloud's
	// p4d.24xlarge): the workers get the nodeSelector
	// node.kubernetes.io/instance-type=<instanceType>, the well-known label
	// the kubelet and cloud providers set. It is merged with
	// worker.scheduling.nodeSelector; a different value for that label
	// there is refused. Simulated workers ignore it (vllm-sim needs no
	// GPU node).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`
	// +optional
	InstanceType string `json:"instanceType,omitempty"`

	// InvocationEndpoint is the OpenAI path clients call, relative to the
	// endpoint URL. Every strategy, kvaware included, serves both
	// completions and chat completions.
	// +kubebuilder:default="v1/chat/completions"
	// +kubebuilder:validation:Pattern=`^/?[A-Za-z0-9._~/-]+$`
	// +kubebuilder:validation:MaxLength=256
	// +optional
	InvocationEndpoint string `json:"invocationEndpoint,omitempty"`

	// ModelSourceConfig says where the weights come from.
	ModelSourceConfig ModelSourceConfig `json:"modelSourceConfig"`

	// EndpointName is the managed offering's SageMaker endpoint
	// registration, accepted so its manifests apply unchanged and reported
	// in the IgnoredFields condition: there is no SageMaker here.
	// +kubebuilder:validation:MaxLength=63
	// +optional
	EndpointName string `json:"endpointName,omitempty"`

	// TLSConfig is the managed offering's certificate handling (an export
	// of the certificate to S3, or an ACM certificate), accepted so its
	// manifests apply unchanged and reported in the IgnoredFields
	// condition. The router's serving certificate is the Secret of
	// intelligentRoutingSpec.tlsSecretName (cert-manager writes one).
	// +optional
	TLSConfig *TLSConfig `json:"tlsConfig,omitempty"`

	// KVCacheSpec configures LMCache (L1 CPU RAM, L2 remote).
	// +kubebuilder:default={}
	// +optional
	KVCacheSpec KVCacheSpec `json:"kvCacheSpec,omitzero"`

	// IntelligentRoutingSpec puts the warmpath router in front of the
	// workers. Both fields may change at any time.
	// +kubebuilder:default={}
	// +optional
	IntelligentRoutingSpec IntelligentRoutingSpec `json:"intelligentRoutingSpec,omitzero"`

	// Metrics configures scraping of workers and router.
	// +kubebuilder:default={}
	// +optional
	Metrics MetricsSpec `json:"metrics,omitzero"`

	// LoadBalancer configures health checking of workers.
	// +kubebuilder:default={}
	// +optional
	LoadBalancer LoadBalancerSpec `json:"loadBalancer,omitzero"`

	// Tracing sends OpenTelemetry traces of the router and the workers to
	// an OTLP collector: one trace per request, the router's spans and
	// the worker's llm_request span joined by W3C trace context.
	// +optional
	Tracing TracingSpec `json:"tracing,omitzero"`

	// Worker is the vLLM container.
	Worker WorkerSpec `json:"worker"`

	// Simulate runs vllm-sim (the operator's --simulator-image) in place of
	// the worker image, for CPU-only clusters. The annotation
	// inference.warmpath.io/simulate: "true" does the same.
	// +optional
	Simulate bool `json:"simulate,omitempty"`
}

// AutoScalingSpec scales the workers. Field names are the managed
// offering's (minReplicaCount ... scaleUpStabilizationTime,
// prometheusTrigger); scaleToZero, prometheusServerAddress and targets are
// warmpath additions. Its cloudWatchTrigger is cloud-only and not accepted.
//
// +kubebuilder:validation:XValidation:rule="self.minReplicaCount <= self.maxReplicaCount",message="autoScalingSpec.minReplicaCount must not exceed maxReplicaCount"
// +kubebuilder:validation:XValidation:rule="self.minReplicaCount >= 1 || (has(self.scaleToZero) && self.scaleToZero)",message="autoScalingSpec.minReplicaCount 0 needs scaleToZero: true (scale to zero is off by default: the first request after it waits for a worker to start and load the model)"
// +kubebuilder:validation:XValidation:rule="has(self.targets) || has(self.prometheusTrigger)",message="autoScalingSpec needs something to scale on: targets (waitingRequestsPerWorker, kvCacheUsagePercent, routerTTFTMilliseconds) or prometheusTrigger"
type AutoScalingSpec struct {
	// MinReplicaCount is the fewest workers the autoscaler keeps; 0 only
	// with scaleToZero.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +optional
	MinReplicaCount *int32 `json:"minReplicaCount,omitempty"`

	// MaxReplicaCount is the most workers the autoscaler starts.
	// +kubebuilder:default=5
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	// +optional
	MaxReplicaCount *int32 `json:"maxReplicaCount,omitempty"`

	// PollingInterval is how often KEDA evaluates the triggers, in
	// seconds (KEDA only; an HPA follows its controller's sync period,
	// 15 s by default).
	// +kubebuilder:default=30
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=3600
	// +optional
	PollingInterval *int32 `json:"pollingInterval,omitempty"`

	// InitialCooldownPeriod delays KEDA's first scale to zero after the
	// ScaledObject is created, in seconds (KEDA, scaleToZero only).
	// +kubebuilder:default=300
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=86400
	// +optional
	InitialCooldownPeriod *int32 `json:"initialCooldownPeriod,omitempty"`

	// CooldownPeriod is how long KEDA waits after the last active trigger
	// before scaling to zero, in seconds (KEDA, scaleToZero only).
	// +kubebuilder:default=300
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=86400
	// +optional
	CooldownPeriod *int32 `json:"cooldownPeriod,omitempty"`

	// ScaleDownStabilizationTime is the HPA's scale-down stabilisation
	// window, in seconds: the highest recommendation within it wins, so a
	// short lull does not remove a worker (and its cache).
	// +kubebuilder:default=300
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=3600
	// +optional
	ScaleDownStabilizationTime *int32 `json:"scaleDownStabilizationTime,omitempty"`

	// ScaleUpStabilizationTime is the HPA's scale-up stabilisation window,
	// in seconds.
	// +kubebuilder:default=0
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=3600
	// +optional
	ScaleUpStabilizationTime *int32 `json:"scaleUpStabilizationTime,omitempty"`

	// ScaleToZero lets minReplicaCount be 0. Only KEDA scales to zero; an
	// HPA keeps at least one worker. A warmpath addition, off by default.
	// +optional
	ScaleToZero bool `json:"scaleToZero,omitempty"`

	// PrometheusServerAddress is the Prometheus KEDA queries for targets
	// (and for a prometheusTrigger without its own serverAddress), e.g.
	// http://prometheus-operated.monitoring.svc:9090. A warmpath addition;
	// the HPA path reads metrics through a metrics adapter instead and
	// does not use it.
	// +kubebuilder:validation:Pattern=`^https?://[^\s]+$`
	// +kubebuilder:validation:MaxLength=512
	// +optional
	PrometheusServerAddress string `json:"prometheusServerAddress,omitempty"`

	// Targets are the load signals to scale on, each a target the
	// autoscaler keeps the measured value at; with several, the one
	// asking for the most workers wins. A warmpath addition.
	// +optional
	Targets *AutoScalingTargets `json:"targets,omitempty"`

	// PrometheusTrigger scales on a PromQL query of your own, as the
	// managed offering's trigger of that name.
	// +optional
	PrometheusTrigger *PrometheusTrigger `json:"prometheusTrigger,omitempty"`
}

// AutoScalingTargets are load signals with the metric names vLLM and the
// router publish.
//
// +kubebuilder:validation:XValidation:rule="has(self.waitingRequestsPerWorker) || has(self.kvCacheUsagePercent) || has(self.routerTTFTMilliseconds)",message="targets needs at least one of waitingRequestsPerWorker, kvCacheUsagePercent, routerTTFTMilliseconds"
type AutoScalingTargets struct {
	// WaitingRequestsPerWorker is the target of vLLM's
	// vllm:num_requests_waiting (requests queued, not yet scheduled)
	// averaged over the workers.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100000
	// +optional
	WaitingRequestsPerWorker *int32 `json:"waitingRequestsPerWorker,omitempty"`

	// KVCacheUsagePercent is the target of vLLM's vllm:kv_cache_usage_perc
	// (the GPU KV cache's used fraction) averaged over the workers, in
	// percent.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +optional
	KVCacheUsagePercent *int32 `json:"kvCacheUsagePercent,omitempty"`

	// RouterTTFTMilliseconds is the target of the 90th percentile of the
	// router's time to first token (warmpath_router_ttft_seconds) over the
	// last 2 minutes, in milliseconds. Needs the router.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=600000
	// +optional
	RouterTTFTMilliseconds *int32 `json:"routerTTFTMilliseconds,omitempty"`
}

// MetricType is how a Prometheus trigger's value meets its target.
// +kubebuilder:validation:Enum=Average;Value
type MetricType string

// Prometheus trigger metric types, the managed offering's names: Average
// divides the query's value by the workers (HPA AverageValue), Value
// compares it whole (HPA Value).
const (
	MetricTypeAverage MetricType = "Average"
	MetricTypeValue   MetricType = "Value"
)

// PrometheusTrigger is a PromQL query to scale on.
type PrometheusTrigger struct {
	// Name names the trigger; on the HPA path it is the External metric
	// name a metrics adapter must serve (default prometheus_trigger).
	// +kubebuilder:validation:Pattern=`^[A-Za-z_][A-Za-z0-9_:.-]*$`
	// +kubebuilder:validation:MaxLength=128
	// +optional
	Name string `json:"name,omitempty"`

	// ServerAddress is the Prometheus to query (KEDA only); default
	// autoScalingSpec.prometheusServerAddress.
	// +kubebuilder:validation:Pattern=`^https?://[^\s]+$`
	// +kubebuilder:validation:MaxLength=512
	// +optional
	ServerAddress string `json:"serverAddress,omitempty"`

	// Query is the PromQL query (KEDA only: on the HPA path the metrics
	// adapter's rule for Name holds the query).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	Query string `json:"query"`

	// TargetValue is the value to keep the query at.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:ExclusiveMinimum=true
	TargetValue float64 `json:"targetValue"`

	// MetricType is Average (the value divided by the workers, the
	// default) or Value (the value as it is).
	// +kubebuilder:default=Average
	// +optional
	MetricType MetricType `json:"metricType,omitempty"`

	// Namespace is KEDA's namespace parameter for multi-tenant
	// Prometheus back ends (Cortex, Thanos); not a Kubernetes namespace.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Namespace string `json:"namespace,omitempty"`

	// CustomHeaders are extra request headers for the query,
	// "name1=value1,name2=value2" (KEDA only).
	// +kubebuilder:validation:MaxLength=4096
	// +optional
	CustomHeaders string `json:"customHeaders,omitempty"`

	// UseCachedMetrics lets KEDA answer the HPA from the value read at
	// the last polling interval instead of querying again (KEDA only).
	// +optional
	UseCachedMetrics *bool `json:"useCachedMetrics,omitempty"`
}

// TracingSpec is where traces go and how many.
type TracingSpec struct {
	// OTLPEndpoint is the collector's OTLP/HTTP base URL, e.g.
	// http://otel-collector.observability:4318. The router exports to it
	// (--otlp-endpoint); the workers to its /v1/traces
	// (vLLM's --otlp-traces-endpoint, with OTEL_EXPORTER_OTLP_TRACES_PROTOCOL
	// http/protobuf). Empty: no tracing.
	// +kubebuilder:validation:Pattern=`^https?://[^\s/]+(/[^\s]*)?$`
	// +kubebuilder:validation:MaxLength=2048
	// +optional
	OTLPEndpoint string `json:"otlpEndpoint,omitempty"`

	// SamplePercent is the share of requests traced that arrive without a
	// caller's sampling decision (a caller's traceparent decides for its
	// own requests).
	// +kubebuilder:default=100
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	// +optional
	SamplePercent *int32 `json:"samplePercent,omitempty"`
}

// TLSConfig is the managed offering's tlsConfig. Neither field has an
// effect here (both are reported in the IgnoredFields condition).
type TLSConfig struct {
	// TLSCertificateOutputS3Uri is where the managed offering exports the
	// certificate it generates, e.g. s3://tls-bucket/certs. Here the
	// certificate lives in the Secret of
	// intelligentRoutingSpec.tlsSecretName: clients take the CA from the
	// issuer (cert-manager's ca.crt) rather than from a bucket.
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:Pattern=`^s3://([^/]+)/?(.*)$`
	// +optional
	TLSCertificateOutputS3Uri string `json:"tlsCertificateOutputS3Uri,omitempty"`

	// CustomCertificateConfig names an ACM certificate for the managed
	// offering's load balancer. Here: a cert-manager Certificate (or any
	// kubernetes.io/tls Secret) named in intelligentRoutingSpec.tlsSecretName
	// or intelligentRoutingSpec.ingress.tlsSecretName.
	// +optional
	CustomCertificateConfig *CustomCertificateConfig `json:"customCertificateConfig,omitempty"`
}

// CustomCertificateConfig is the managed offering's ACM certificate.
type CustomCertificateConfig struct {
	// ACMArn is the certificate's ARN.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	ACMArn string `json:"acmArn"`
	// DomainName is the certificate's domain.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	DomainName string `json:"domainName"`
}

// ModelSourceConfig is the model's origin.
//
// +kubebuilder:validation:XValidation:rule="self.modelSourceType != 'huggingface' || has(self.huggingFaceModel)",message="modelSourceType huggingface needs huggingFaceModel.modelId"
// +kubebuilder:validation:XValidation:rule="self.modelSourceType != 'kubernetesVolume' || has(self.kubernetesVolume)",message="modelSourceType kubernetesVolume needs kubernetesVolume.claimName"
// +kubebuilder:validation:XValidation:rule="self.modelSourceType != 's3' || has(self.s3Storage)",message="modelSourceType s3 needs s3Storage.bucketName"
// +kubebuilder:validation:XValidation:rule="self.modelSourceType != 'fsx' || has(self.fsxStorage)",message="modelSourceType fsx needs fsxStorage.fileSystemId"
type ModelSourceConfig struct {
	// ModelSourceType is huggingface (vLLM downloads from the Hub),
	// kubernetesVolume (a PersistentVolumeClaim), s3 (an init container
	// copies the model from S3-compatible storage into the model volume)
	// or fsx (an FSx for Lustre file system through its CSI driver's
	// claim).
	ModelSourceType ModelSourceType `json:"modelSourceType"`

	// S3Storage is the bucket, for modelSourceType s3; modelLocation is
	// the key prefix (a directory) of the model's files.
	// +optional
	S3Storage *S3Storage `json:"s3Storage,omitempty"`

	// FSxStorage is the file system, for modelSourceType fsx;
	// modelLocation is the model's directory in it.
	// +optional
	FSxStorage *FSxStorage `json:"fsxStorage,omitempty"`

	// HuggingFaceModel is the Hub model, for modelSourceType huggingface.
	// +optional
	HuggingFaceModel *HuggingFaceModel `json:"huggingFaceModel,omitempty"`

	// KubernetesVolume is a PersistentVolumeClaim holding the weights, for
	// modelSourceType kubernetesVolume. It is mounted at
	// worker.modelVolumeMount.
	// +optional
	KubernetesVolume *KubernetesVolume `json:"kubernetesVolume,omitempty"`

	// ModelLocation is the path of the model inside the source: the key
	// prefix in the bucket (s3), the directory in the file system (fsx,
	// mounted as the model volume's subPath) or in the claim
	// (kubernetesVolume).
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	ModelLocation string `json:"modelLocation,omitempty"`

	// PrefetchEnabled puts the model in RAM before vLLM starts, as the
	// managed offering does for models that fit in memory: the s3 and
	// huggingface model volumes become memory-backed (tmpfs) emptyDirs,
	// counted against the worker pod's memory. For fsx and
	// kubernetesVolume, read in place from the claim, it is reported in
	// the IgnoredFields condition.
	// +optional
	PrefetchEnabled bool `json:"prefetchEnabled,omitempty"`
}

// S3Storage is an S3 or S3-compatible bucket holding the model.
type S3Storage struct {
	// BucketName is the bucket.
	// +kubebuilder:validation:MinLength=3
	// +kubebuilder:validation:MaxLength=255
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9._-]*$`
	BucketName string `json:"bucketName"`

	// Region is the bucket's region; unset, us-east-1 (which
	// S3-compatible servers usually accept whatever theirs is).
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[a-z0-9-]+$`
	// +optional
	Region string `json:"region,omitempty"`

	// EndpointURL is an S3-compatible server, e.g.
	// http://minio.storage.svc:9000, addressed path-style (the bucket in
	// the path), as such servers expect; unset, AWS S3. A warmpath
	// addition.
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^https?://[^\s/?#]+(/[^\s?#]*)?$`
	// +optional
	EndpointURL string `json:"endpointUrl,omitempty"`

	// CredentialsSecretRef names a Secret in the endpoint's namespace with
	// the keys AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and optionally
	// AWS_SESSION_TOKEN), passed to the fetching init container. Unset, the
	// AWS SDK's chain applies: web identity (IRSA, EKS Pod Identity) of the
	// pod's service account, or the node's instance role. A warmpath
	// addition.
	// +optional
	CredentialsSecretRef *corev1.LocalObjectReference `json:"credentialsSecretRef,omitempty"`
}

// FSxStorage is an FSx for Lustre file system holding the model. The pod
// mounts it through a PersistentVolumeClaim bound to the FSx CSI driver's
// PersistentVolume (driver fsx.csi.aws.com, volumeHandle the file system
// id, volumeAttributes dnsname and mountname), which the cluster's
// administrator creates once per namespace.
type FSxStorage struct {
	// FileSystemID is the file system, e.g. fs-0123456789abcdef0.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	FileSystemID string `json:"fileSystemId"`

	// DNSName is the file system's DNS name. It belongs in the
	// PersistentVolume, not the pod: reported in the IgnoredFields
	// condition.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	DNSName string `json:"dnsName,omitempty"`

	// MountName is the file system's Lustre mount name. It belongs in the
	// PersistentVolume, not the pod: reported in the IgnoredFields
	// condition.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	MountName string `json:"mountName,omitempty"`

	// ClaimName is the PersistentVolumeClaim bound to the file system's
	// PersistentVolume; unset, the claim named after fileSystemId. It is
	// mounted read-only. A warmpath addition.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +optional
	ClaimName string `json:"claimName,omitempty"`
}

// HuggingFaceModel is a Hugging Face Hub model.
type HuggingFaceModel struct {
	// ModelID is the Hub id, e.g. meta-llama/Llama-3.1-8B-Instruct.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	ModelID string `json:"modelId"`

	// TokenSecretRef is the Secret key holding the Hub token; it is passed
	// to the worker as HF_TOKEN.
	// +optional
	TokenSecretRef *corev1.SecretKeySelector `json:"tokenSecretRef,omitempty"`
}

// KubernetesVolume is a PersistentVolumeClaim with the model's weights.
type KubernetesVolume struct {
	// ClaimName names a PersistentVolumeClaim in the resource's namespace.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	ClaimName string `json:"claimName"`

	// ReadOnly mounts the claim read-only (the default).
	// +kubebuilder:default=true
	// +optional
	ReadOnly *bool `json:"readOnly,omitempty"`
}

// KVCacheSpec configures LMCache inside each worker.
//
// +kubebuilder:validation:XValidation:rule="!has(self.enableL2Cache) || !self.enableL2Cache || has(self.l2CacheSpec) || (has(self.cacheConfigFile) && size(self.cacheConfigFile) > 0)",message="enableL2Cache needs l2CacheSpec.l2CacheBackend (tieredstorage or redis)"
type KVCacheSpec struct {
	// EnableL1Cache keeps KV in CPU RAM (LMCache local_cpu).
	// +kubebuilder:default=true
	// +optional
	EnableL1Cache *bool `json:"enableL1Cache,omitempty"`

	// EnableL2Cache stores KV in a remote L2 shared by the workers.
	// +kubebuilder:default=false
	// +optional
	EnableL2Cache *bool `json:"enableL2Cache,omitempty"`

	// CacheConfigFile is a raw LMCache YAML configuration. When set it
	// replaces every LMCache setting the operator would derive.
	// +kubebuilder:validation:MaxLength=65536
	// +optional
	CacheConfigFile string `json:"cacheConfigFile,omitempty"`

	// L2CacheSpec selects the L2 backend.
	// +optional
	L2CacheSpec *L2CacheSpec `json:"l2CacheSpec,omitempty"`

	// L1CacheSizeGB is the L1 size per worker in GB (LMCache
	// max_local_cpu_size). A warmpath addition.
	// +kubebuilder:default=5
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=4096
	// +optional
	L1CacheSizeGB *int32 `json:"l1CacheSizeGB,omitempty"`

	// ChunkSize is the tokens per stored chunk (LMCache chunk_size). A
	// warmpath addition.
	// +kubebuilder:default=256
	// +kubebuilder:validation:Minimum=16
	// +kubebuilder:validation:Maximum=8192
	// +optional
	ChunkSize *int32 `json:"chunkSize,omitempty"`

	// KVBytesPerToken is the model's KV cache size per token on one worker
	// (2 × layers × KV heads × head dim × dtype bytes ÷ tensor parallel:
	// 131072 for Llama-3.1-8B in bf16). A warmpath addition: with the L1
	// cache on, the router's prefixaware then counts each worker's L1
	// (l1CacheSizeGB over this) in its cache capacity, instead of only the
	// GPU cache vLLM reports.
	// +kubebuilder:validation:Minimum=1
	// +optional
	KVBytesPerToken *int64 `json:"kvBytesPerToken,omitempty"`

	// RemoteSerde is the L2 value encoding (LMCache remote_serde). A
	// warmpath addition.
	// +kubebuilder:default=naive
	// +optional
	RemoteSerde RemoteSerde `json:"remoteSerde,omitempty"`
}

// L2CacheSpec is the remote KV cache shared by the workers.
//
// +kubebuilder:validation:XValidation:rule="self.l2CacheBackend.lowerAscii() != 'redis' || has(self.l2CacheLocalUrl)",message="l2CacheLocalUrl is required when l2CacheBackend is redis, e.g. redis://redis.default.svc:6379"
// +kubebuilder:validation:XValidation:rule="!has(self.passwordSecretRef) || (has(self.l2CacheLocalUrl) && !self.l2CacheLocalUrl.startsWith('lm://'))",message="passwordSecretRef needs an l2CacheLocalUrl other than lm:// (lm:// has no authentication)"
type L2CacheSpec struct {
	// L2CacheBackend is tieredstorage (the warmpath cache server on each
	// node) or redis, in any letter case.
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.lowerAscii() in ['tieredstorage', 'redis']",message="l2CacheBackend must be tieredstorage or redis"
	L2CacheBackend L2Backend `json:"l2CacheBackend"`

	// L2CacheLocalUrl is the L2 address. Required for redis
	// (redis://, rediss://, redis-sentinel://, redis-cluster://, valkey://);
	// for tieredstorage it overrides the node-local cache server
	// (lm://host:port).
	// A password never goes in it (the CR and the pod spec are readable
	// by far more than the Secret): use passwordSecretRef.
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^(redis|rediss|redis-sentinel|redis-cluster|valkey|resp|lm)://[^\s/?#]+(/[^\s]*)?$`
	// +kubebuilder:validation:XValidation:rule="!self.matches('^[a-z-]+://[^/@]*:[^/@]*@')",message="l2CacheLocalUrl must not carry a password: put it in a Secret and set passwordSecretRef"
	// +optional
	L2CacheLocalUrl string `json:"l2CacheLocalUrl,omitempty"`
	// PasswordSecretRef is the Secret key holding the L2's password (Redis
	// requirepass, or the cache server's RESP token). The operator passes
	// it to the workers as an environment variable from the Secret and
	// writes only a reference to it into LMCACHE_REMOTE_URL, which LMCache
	// reads the password from, so the text appears in neither the CR nor
	// the pod spec. The password must be URL-safe (no '@', ':', '/').
	// +optional
	PasswordSecretRef *corev1.SecretKeySelector `json:"passwordSecretRef,omitempty"`
}

// IntelligentRoutingSpec configures the router.
//
// +kubebuilder:validation:XValidation:rule="!has(self.routerResources) || !has(self.routerScheduling) || !has(self.routerScheduling.resources)",message="set routerResources or routerScheduling.resources, not both"
type IntelligentRoutingSpec struct {
	// Enabled puts the router in front of the workers.
	// +kubebuilder:default=false
	// +optional
	Enabled *bool `json:"enabled,omitempty"`

	// RoutingStrategy is the router's strategy; changing it reconfigures
	// the running router without a restart.
	// +kubebuilder:default=prefixaware
	// +optional
	RoutingStrategy RoutingStrategy `json:"routingStrategy,omitempty"`

	// SessionHeaders are the request headers the session strategy keys
	// on, in order. A warmpath addition; empty means the router's default.
	// +kubebuilder:validation:MaxItems=8
	// +optional
	SessionHeaders []string `json:"sessionHeaders,omitempty"`

	// RouterReplicas is the number of router pods. A warmpath addition.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +optional
	RouterReplicas *int32 `json:"routerReplicas,omitempty"`
	// RouterResources replaces the router's default resources (requests
	// 100m CPU, 128Mi memory). A warmpath addition.
	// +optional
	RouterResources *corev1.ResourceRequirements `json:"routerResources,omitempty"`

	// RouterScheduling places the router pods: node selector,
	// tolerations, affinity, priority and runtime class, pull secrets,
	// topology spread and resources (the last an alternative to
	// routerResources). A warmpath addition.
	// +optional
	RouterScheduling *PodScheduling `json:"routerScheduling,omitempty"`

	// APIKeySecretRef names the key of a Secret in the endpoint's namespace
	// holding the API keys clients must present to the router
	// ("Authorization: Bearer <key>"), one per line ("#" starts a comment).
	// The router rereads it when the Secret changes: keys rotate without a
	// restart. Unset: the router asks for no key. A warmpath addition.
	// +optional
	APIKeySecretRef *corev1.SecretKeySelector `json:"apiKeySecretRef,omitempty"`

	// TLSSecretName names a kubernetes.io/tls Secret (tls.crt, tls.key) in
	// the endpoint's namespace, such as a cert-manager Certificate's
	// secretName: the router serves clients over TLS only, with that
	// certificate, and takes a renewed one without a restart; the endpoint's
	// Service then listens on 443 and its status URL is https. A warmpath
	// addition (the managed offering exports its certificate to S3
	// instead).
	// +kubebuilder:validation:MaxLength=253
	// +optional
	TLSSecretName string `json:"tlsSecretName,omitempty"`

	// Ingress exposes the endpoint's Service (<name>) outside the cluster
	// through a networking.k8s.io/v1 Ingress named <name>, which the
	// operator creates, keeps and deletes when the field is removed. When
	// the router serves TLS (tlsSecretName) the Ingress points at the
	// Service's https port, and the ingress controller must be told the
	// backend speaks HTTPS (with ingress-nginx, the annotation
	// nginx.ingress.kubernetes.io/backend-protocol: HTTPS). A warmpath
	// addition.
	// +optional
	Ingress *RouterIngress `json:"ingress,omitempty"`

	// HTTPRoute exposes the endpoint's Service (<name>) through a Gateway
	// API gateway.networking.k8s.io/v1 HTTPRoute named <name>, attached to
	// the Gateways of parentRefs. It is created only where the Gateway API
	// CRDs are installed; the condition HTTPRouteReady says whether it was.
	// When the router serves TLS the route points at the Service's https
	// port, and the Gateway needs a BackendTLSPolicy for that port to
	// speak HTTPS to it. Ingress and HTTPRoute may both be set (while
	// moving from one to the other). A warmpath addition.
	// +optional
	HTTPRoute *RouterHTTPRoute `json:"httpRoute,omitempty"`
}

// RouterIngress is the Ingress in front of the endpoint's Service.
type RouterIngress struct {
	// ClassName is the IngressClass (spec.ingressClassName), e.g. nginx;
	// unset, the cluster's default IngressClass serves it.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +optional
	ClassName string `json:"className,omitempty"`

	// Host is the host name clients use, e.g. llm.example.com (a leading
	// "*." matches every subdomain); unset, every host the ingress
	// controller serves matches.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +optional
	Host string `json:"host,omitempty"`

	// Path is the path prefix routed to the endpoint (pathType Prefix),
	// passed on unchanged: the router serves /v1/... itself, so a prefix
	// other than "/" needs a rewrite the ingress controller is told of in
	// annotations.
	// +kubebuilder:default="/"
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern=`^/[A-Za-z0-9._~/-]*$`
	// +optional
	Path string `json:"path,omitempty"`

	// Annotations are set on the Ingress, for the ingress controller
	// (backend protocol, timeouts, body size, cert-manager's issuer).
	// +kubebuilder:validation:MaxProperties=64
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`

	// TLSSecretName names a kubernetes.io/tls Secret in the endpoint's
	// namespace with which the ingress controller terminates TLS for host
	// (the Ingress's spec.tls). It is independent of
	// intelligentRoutingSpec.tlsSecretName, the router's own certificate
	// for the hop from the ingress controller to the router.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	TLSSecretName string `json:"tlsSecretName,omitempty"`
}

// RouterHTTPRoute is the Gateway API HTTPRoute in front of the endpoint's
// Service.
type RouterHTTPRoute struct {
	// ParentRefs are the Gateways (or their listeners) the route attaches
	// to.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +listType=atomic
	ParentRefs []GatewayParentRef `json:"parentRefs"`

	// Hostnames the route matches (the HTTPRoute's spec.hostnames); unset,
	// every host the listener accepts.
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=253
	// +kubebuilder:validation:items:Pattern=`^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +listType=atomic
	// +optional
	Hostnames []string `json:"hostnames,omitempty"`

	// Annotations are set on the HTTPRoute.
	// +kubebuilder:validation:MaxProperties=64
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
}

// GatewayParentRef names a Gateway (gateway.networking.k8s.io) the
// HTTPRoute attaches to.
type GatewayParentRef struct {
	// Name of the Gateway.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// Namespace of the Gateway; unset, the endpoint's. A Gateway in
	// another namespace must allow routes from this one
	// (listeners[].allowedRoutes.namespaces).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +optional
	Namespace string `json:"namespace,omitempty"`

	// SectionName is the Gateway listener's name to attach to; unset,
	// every listener that admits the route.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +optional
	SectionName string `json:"sectionName,omitempty"`
}

// MetricsSpec configures metrics collection.
type MetricsSpec struct {
	// Enabled creates ServiceMonitors when the Prometheus Operator is
	// installed.
	// +kubebuilder:default=true
	// +optional
	Enabled *bool `json:"enabled,omitempty"`

	// MetricsScrapeIntervalSeconds is the scrape interval.
	// +kubebuilder:default=15
	// +kubebuilder:validation:Minimum=5
	// +kubebuilder:validation:Maximum=300
	// +optional
	MetricsScrapeIntervalSeconds *int32 `json:"metricsScrapeIntervalSeconds,omitempty"`

	// ModelMetrics is where the workers expose metrics.
	// +kubebuilder:default={}
	// +optional
	ModelMetrics ModelMetrics `json:"modelMetrics,omitzero"`
}

// ModelMetrics is the workers' metrics endpoint.
type ModelMetrics struct {
	// Path of the metrics endpoint.
	// +kubebuilder:default="/metrics"
	// +kubebuilder:validation:Pattern=`^/[^\s]*$`
	// +kubebuilder:validation:MaxLength=256
	// +optional
	Path string `json:"path,omitempty"`

	// Port of the metrics endpoint.
	// +kubebuilder:default=8000
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +optional
	Port int32 `json:"port,omitempty"`
}

// LoadBalancerSpec configures worker health checks.
type LoadBalancerSpec struct {
	// HealthCheckPath is the workers' health endpoint, used for the
	// default readiness and liveness probes.
	// +kubebuilder:default="/health"
	// +kubebuilder:validation:Pattern=`^/[^\s]*$`
	// +kubebuilder:validation:MaxLength=256
	// +optional
	HealthCheckPath string `json:"healthCheckPath,omitempty"`
}

// WorkerSpec is the vLLM worker container.
//
// +kubebuilder:validation:XValidation:rule="!has(self.resources) || !has(self.scheduling) || !has(self.scheduling.resources)",message="set worker.resources or worker.scheduling.resources, not both"
type WorkerSpec struct {
	// Image is the vLLM+LMCache image, e.g. lmcache/vllm-openai:<tag>.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	Image string `json:"image"`

	// Args are the vLLM arguments; the operator appends its caching,
	// events and port flags.
	// +optional
	Args []string `json:"args,omitempty"`

	// Command replaces the image's entrypoint.
	// +optional
	Command []string `json:"command,omitempty"`

	// EnvironmentVariables are added to the worker; the operator's LMCache
	// variables take precedence over variables of the same name.
	// +optional
	EnvironmentVariables []corev1.EnvVar `json:"environmentVariables,omitempty"`

	// Resources of the worker container (GPUs, CPU, memory).
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitzero"`

	// ModelInvocationPort is the port vLLM serves on.
	// +kubebuilder:default={}
	// +optional
	ModelInvocationPort ModelInvocationPort `json:"modelInvocationPort,omitzero"`

	// ModelVolumeMount is where the model volume is mounted.
	// +optional
	ModelVolumeMount *ModelVolumeMount `json:"modelVolumeMount,omitempty"`

	// Volumes are extra pod volumes. A warmpath addition.
	// +optional
	Volumes []corev1.Volume `json:"volumes,omitempty"`

	// VolumeMounts are extra container mounts. A warmpath addition.
	// +optional
	VolumeMounts []corev1.VolumeMount `json:"volumeMounts,omitempty"`

	// Probes replace the default HTTP probes on healthCheckPath.
	// +optional
	Probes Probes `json:"probes,omitzero"`

	// RequestLimits bound the requests the router admits.
	// +optional
	RequestLimits *RequestLimits `json:"requestLimits,omitempty"`
	// PodSecurityContext replaces the workers' default pod security context
	// (non-root uid 1000, fsGroup 1000, RuntimeDefault seccomp), for an
	// image that must run as another user. A warmpath addition.
	// +optional
	PodSecurityContext *corev1.PodSecurityContext `json:"podSecurityContext,omitempty"`
	// SecurityContext replaces the worker container's default security
	// context (no privilege escalation, all capabilities dropped; a
	// writable root filesystem, which vLLM's images expect), for an image
	// that needs a capability or more. A warmpath addition.
	// +optional
	SecurityContext *corev1.SecurityContext `json:"securityContext,omitempty"`
	// Scheduling places the worker pods: node selector (merged with
	// spec.instanceType), tolerations (GPU nodes are usually tainted),
	// affinity, priority and runtime class (e.g. nvidia), pull secrets,
	// topology spread and resources (the last an alternative to
	// worker.resources). A warmpath addition.
	// +optional
	Scheduling *PodScheduling `json:"scheduling,omitempty"`
}

// PodScheduling is where and how a component's pods are scheduled. Every
// field is passed to the pod spec as is (the core/v1 types), except where
// a field's comment says otherwise; an unset field leaves the pod's
// default.
type PodScheduling struct {
	// NodeSelector must match a node's labels for a pod to run there.
	// +kubebuilder:validation:MaxProperties=64
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`

	// Tolerations let the pods run on nodes with matching taints.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	// +optional
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`

	// Affinity holds node affinity and pod (anti-)affinity rules.
	// +optional
	Affinity *corev1.Affinity `json:"affinity,omitempty"`

	// PriorityClassName names a PriorityClass; the pods get its priority
	// (and may preempt lower-priority pods).
	// +kubebuilder:validation:MaxLength=253
	// +optional
	PriorityClassName string `json:"priorityClassName,omitempty"`

	// RuntimeClassName names a RuntimeClass, e.g. nvidia where the GPU
	// runtime is not the node's default. Simulated workers ignore it.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +optional
	RuntimeClassName *string `json:"runtimeClassName,omitempty"`

	// ImagePullSecrets name Secrets in the endpoint's namespace used to
	// pull the component's image.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	// +optional
	ImagePullSecrets []corev1.LocalObjectReference `json:"imagePullSecrets,omitempty"`

	// TopologySpreadConstraints spread the pods over zones or nodes. A
	// constraint without a labelSelector gets the component's own pod
	// labels (inference.warmpath.io/endpoint and
	// app.kubernetes.io/component), so it spreads the component's pods:
	// without one it would count none.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=8
	// +optional
	TopologySpreadConstraints []corev1.TopologySpreadConstraint `json:"topologySpreadConstraints,omitempty"`

	// Resources of the component's container. An alternative to
	// worker.resources and intelligentRoutingSpec.routerResources: setting
	// both is refused. Simulated workers ignore it (vllm-sim requests
	// 100m CPU and 128Mi).
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`
}

// ModelInvocationPort is the worker's serving port.
type ModelInvocationPort struct {
	// ContainerPort is the port number.
	// +kubebuilder:default=8000
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +optional
	ContainerPort int32 `json:"containerPort,omitempty"`

	// Name is the port name.
	// +kubebuilder:default=http
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([a-z0-9-]{0,13}[a-z0-9])?$`
	// +optional
	Name string `json:"name,omitempty"`
}

// ModelVolumeMount is the model volume's mount in the worker.
type ModelVolumeMount struct {
	// Name of the volume.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`

	// MountPath in the worker container.
	// +kubebuilder:validation:Pattern=`^/`
	// +kubebuilder:validation:MaxLength=1024
	MountPath string `json:"mountPath"`
}

// Probes replace the operator's default worker probes.
type Probes struct {
	// +optional
	Liveness *corev1.Probe `json:"liveness,omitempty"`
	// +optional
	Readiness *corev1.Probe `json:"readiness,omitempty"`
	// +optional
	Startup *corev1.Probe `json:"startup,omitempty"`
}

// RequestLimits bound the requests the router admits.
type RequestLimits struct {
	// +kubebuilder:validation:Minimum=0
	// +optional
	MaxConcurrentRequests int32 `json:"maxConcurrentRequests,omitempty"`
	// +kubebuilder:validation:Minimum=0
	// +optional
	MaxQueueSize int32 `json:"maxQueueSize,omitempty"`
	// +kubebuilder:validation:Enum=429;503
	// +optional
	OverflowStatusCode int32 `json:"overflowStatusCode,omitempty"`
}

// Endpoint states.
const (
	StatePending     = "DeploymentPending"
	StateProgressing = "DeploymentInProgress"
	StateComplete    = "DeploymentComplete"
	StateFailed      = "DeploymentFailed"
)

// Condition types.
const (
	ConditionWorkersReady = "WorkersReady"
	ConditionRouterReady  = "RouterReady"
	ConditionCacheReady   = "CacheReady"
	ConditionReady        = "Ready"
	// ConditionWorkersScheduled is False, reason Unschedulable, while the
	// scheduler cannot place a worker pod, with the scheduler's message
	// (which resource or rule no node satisfies). It does not count
	// towards Ready: WorkersReady is False then too.
	ConditionWorkersScheduled = "WorkersScheduled"
	// ConditionKVEventsUsable says whether the workers, as configured,
	// publish KV events the kvaware router can index (vLLM's GPU blocks,
	// LMCache's CPU stores lined up with them). Only kvaware endpoints
	// have it. False is a refusal: Ready is False and the state
	// DeploymentFailed until the spec is fixed, though every child is
	// still applied and serves. Unknown (an image whose LMCache release
	// its tag does not tell) does not count towards Ready.
	ConditionKVEventsUsable = "KVEventsUsable"
	// ConditionHTTPRouteReady says whether the HTTPRoute of
	// intelligentRoutingSpec.httpRoute was applied: False, reason
	// CRDNotInstalled, where the Gateway API's HTTPRoute CRD is absent.
	// Only endpoints with httpRoute have it, and it does not count towards
	// Ready: the endpoint serves in the cluster either way.
	ConditionHTTPRouteReady = "HTTPRouteReady"
	// ConditionAutoscalingReady says which autoscaler the operator wrote
	// for autoScalingSpec (a KEDA ScaledObject or an HPA) and the metrics
	// pipeline it needs; False when it could write none. Only endpoints
	// with autoScalingSpec have it, and it does not count towards Ready.
	ConditionAutoscalingReady = "AutoscalingReady"
	// ConditionIgnoredFields lists the spec's fields that are accepted for
	// compatibility with the managed offering but have no effect here
	// (cloud-only: endpointName, tlsConfig, ...). Only endpoints that set
	// such a field have it (status True, reason CloudOnlyFields); it does
	// not count towards Ready.
	ConditionIgnoredFields = "IgnoredFields"
	// ConditionRequestLimitsHeld says whether the routers together admit
	// no more than worker.requestLimits: each of routerReplicas routers
	// holds its share, rounded down, and at least 1 (0 would be
	// unlimited), so False when a limit is smaller than the number of
	// routers. Only endpoints with more than one router and a limit have
	// it, and it does not count towards Ready.
	ConditionRequestLimitsHeld = "RequestLimitsHeld"
	// ConditionKVIndexShared says whether the kvaware routers keep one
	// index, in the L2's Redis, or each its own (False, reason
	// PerReplica). Only kvaware endpoints with more than one router have
	// it, and it does not count towards Ready.
	ConditionKVIndexShared = "KVIndexShared"
)

// InstanceTypeLabel is the well-known node label spec.instanceType
// selects on.
const InstanceTypeLabel = corev1.LabelInstanceTypeStable

// InferenceEndpointConfigStatus is the observed state.
type InferenceEndpointConfigStatus struct {
	// State summarises the conditions.
	// +optional
	State string `json:"state,omitempty"`

	// Conditions: WorkersReady, WorkersScheduled, RouterReady, CacheReady,
	// KVEventsUsable (kvaware only), Ready, ServiceMonitorReady,
	// HTTPRouteReady (with intelligentRoutingSpec.httpRoute only),
	// AutoscalingReady (with autoScalingSpec only),
	// IgnoredFields (with cloud-only fields set only).
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// ObservedGeneration is the spec generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// URL is the in-cluster base URL to send requests to.
	// +optional
	URL string `json:"url,omitempty"`

	// Endpoints lists the full invocation URL, as the managed offering
	// reports it.
	// +optional
	Endpoints []string `json:"endpoints,omitempty"`

	// ReadyWorkers is the number of ready worker pods.
	// +optional
	ReadyWorkers int32 `json:"readyWorkers"`

	// DesiredWorkers is spec.replicas as last reconciled or, with
	// autoScalingSpec, the count the autoscaler last chose.
	// +optional
	DesiredWorkers int32 `json:"desiredWorkers"`

	// Workers is "ready/desired", for kubectl.
	// +optional
	Workers string `json:"workers,omitempty"`

	// Replicas is the worker Deployment's current number of pods, the
	// scale subresource's status (kubectl scale, autoscalers).
	// +optional
	Replicas int32 `json:"replicas"`

	// Selector is the worker pods' label selector, for the scale
	// subresource: an autoscaler targeting the endpoint reads the
	// workers' pod metrics through it.
	// +optional
	Selector string `json:"selector,omitempty"`
}

// InferenceEndpointConfig is a model served by vLLM+LMCache workers with
// tiered KV caching, optionally behind the cache-aware warmpath router.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.replicas,statuspath=.status.replicas,selectorpath=.status.selector
// +kubebuilder:resource:shortName=iec;iecs,categories=warmpath
// +kubebuilder:printcolumn:name="Strategy",type=string,JSONPath=`.spec.intelligentRoutingSpec.routingStrategy`
// +kubebuilder:printcolumn:name="Workers",type=string,JSONPath=`.status.workers`,description="ready/desired workers"
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.state`
// +kubebuilder:printcolumn:name="URL",type=string,JSONPath=`.status.url`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 55 && self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",message="metadata.name must be a DNS label of at most 55 characters starting with a letter: the operator names the endpoint's Services <name> and <name>-workers"
type InferenceEndpointConfig struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   InferenceEndpointConfigSpec   `json:"spec"`
	Status InferenceEndpointConfigStatus `json:"status,omitempty"`
}

// InferenceEndpointConfigList is a list of InferenceEndpointConfig.
//
// +kubebuilder:object:root=true
type InferenceEndpointConfigList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []InferenceEndpointConfig `json:"items"`
}
