package controller

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/warmpath/warmpath/services/operator/api/v1alpha1"
)

// Fixed worker facts the router and the cache depend on.
const (
	// KVEventsPort and KVReplayPort are where workers publish vLLM KV-cache
	// events (ZMQ PUB) and serve replays, whenever routing is enabled, so
	// switching to kvaware is a router-only change.
	KVEventsPort = 5557
	KVReplayPort = 5558
	// HashSeed is every worker's PYTHONHASHSEED: vLLM's and LMCache's
	// block hashes derive from it, and workers sharing an L2 or a router's
	// index must agree on them.
	HashSeed = "0"

	// l2PasswordEnv carries l2CacheSpec.passwordSecretRef into the worker;
	// LMCACHE_REMOTE_URL refers to it as $(...), which the kubelet expands,
	// so the password is in neither the CR nor the pod spec.
	l2PasswordEnv = "WARMPATH_L2_PASSWORD"

	// eventHashAlgo is the block hash both vLLM (--prefix-caching-hash-algo)
	// and LMCache (pre_caching_hash_algorithm) use when the workers publish
	// KV events: CBOR-serialised SHA-256 is the one algorithm both name the
	// same way and that does not depend on Python's pickle or hash seed, so
	// an LMCache chunk's hash and a vLLM block's hash over the same tokens
	// agree (vllm/config/cache.py PrefixCachingHashAlgo; LMCache
	// lmcache/v1/token_database.py resolves the name through vLLM).
	eventHashAlgo = "sha256_cbor"

	lmcacheConfigDir  = "/etc/lmcache"
	lmcacheConfigFile = "config.yaml"
	kvConnector       = `{"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both"}`
)

// workerPlan is the worker container's derived command line and environment,
// kept separate from the Deployment so the combinations can be compared with
// golden files.
type workerPlan struct {
	Image string
	Args  []string
	Env   []corev1.EnvVar
}

func isTrue(b *bool, def bool) bool {
	if b == nil {
		return def
	}
	return *b
}

func int32Or(v *int32, def int32) int32 {
	if v == nil {
		return def
	}
	return *v
}

func routingEnabled(iec *v1alpha1.InferenceEndpointConfig) bool {
	return isTrue(iec.Spec.IntelligentRoutingSpec.Enabled, false)
}

func simulated(iec *v1alpha1.InferenceEndpointConfig) bool {
	return iec.Spec.Simulate || iec.Annotations[v1alpha1.SimulateAnnotation] == "true"
}

// fetchesModel reports whether the worker pod copies its model from S3
// before the worker starts: a real worker with an s3 source always does,
// a simulated one when SimulateModelFetchAnnotation asks for it.
func fetchesModel(iec *v1alpha1.InferenceEndpointConfig) bool {
	src := iec.Spec.ModelSourceConfig
	if src.ModelSourceType != v1alpha1.ModelSourceS3 || src.S3Storage == nil {
		return false
	}
	return !simulated(iec) || iec.Annotations[v1alpha1.SimulateModelFetchAnnotation] == "true"
}

func workerPort(iec *v1alpha1.InferenceEndpointConfig) (int32, string) {
	p := iec.Spec.Worker.ModelInvocationPort
	port, name := p.ContainerPort, p.Name
	if port == 0 {
		port = 8000
	}
	if name == "" {
		name = "http"
	}
	return port, name
}

// l2Backend returns the lower-cased L2 backend, "" when L2 is off.
func l2Backend(iec *v1alpha1.InferenceEndpointConfig) v1alpha1.L2Backend {
	kv := iec.Spec.KVCacheSpec
	if !isTrue(kv.EnableL2Cache, false) || kv.L2CacheSpec == nil {
		return ""
	}
	return kv.L2CacheSpec.L2CacheBackend.Lower()
}

func cachingEnabled(iec *v1alpha1.InferenceEndpointConfig) bool {
	kv := iec.Spec.KVCacheSpec
	return kv.CacheConfigFile != "" || isTrue(kv.EnableL1Cache, true) || l2Backend(iec) != ""
}

// modelArg is what vLLM serves: the Hub id, or the model's path in the
// mounted volume.
func modelArg(iec *v1alpha1.InferenceEndpointConfig) string {
	src := iec.Spec.ModelSourceConfig
	if src.ModelSourceType == v1alpha1.ModelSourceHuggingFace && src.HuggingFaceModel != nil {
		return src.HuggingFaceModel.ModelID
	}
	if iec.Spec.Worker.ModelVolumeMount != nil {
		return modelPath(iec)
	}
	return iec.Spec.ModelName
}

// positionalModel reports whether args start with vLLM's positional model
// (vllm serve <model> [options]), as the managed offering's samples pass
// it: that names the model as --model does.
func positionalModel(args []string) bool {
	return len(args) > 0 && !strings.HasPrefix(args[0], "-")
}

// hubModelArgs rewrites "--model <modelVolumeMount.mountPath>" (or that
// path as the positional model) to the Hub id for a huggingface source.
// Manifests written for the managed offering point vLLM at the mount path,
// where that offering pre-downloads the model; here vLLM downloads it
// itself into HF_HOME on that volume.
func hubModelArgs(iec *v1alpha1.InferenceEndpointConfig, args []string) []string {
	src, m := iec.Spec.ModelSourceConfig, iec.Spec.Worker.ModelVolumeMount
	if src.ModelSourceType != v1alpha1.ModelSourceHuggingFace || src.HuggingFaceModel == nil || m == nil {
		return args
	}
	want := path.Clean(path.Join(m.MountPath, src.ModelLocation))
	for i, a := range args {
		switch {
		case a == "--model" && i+1 < len(args) && path.Clean(args[i+1]) == want:
			args[i+1] = src.HuggingFaceModel.ModelID
		case a == "--model="+want || a == "--model="+m.MountPath:
			args[i] = "--model=" + src.HuggingFaceModel.ModelID
		case i == 0 && positionalModel(args) && (path.Clean(a) == want || path.Clean(a) == path.Clean(m.MountPath)):
			args[i] = src.HuggingFaceModel.ModelID
		}
	}
	return args
}

func hubCacheVolume(iec *v1alpha1.InferenceEndpointConfig) bool {
	src := iec.Spec.ModelSourceConfig
	return src.ModelSourceType == v1alpha1.ModelSourceHuggingFace && iec.Spec.Worker.ModelVolumeMount != nil
}

func hasFlag(args []string, flag string) bool {
	return slices.ContainsFunc(args, func(a string) bool { return a == flag || strings.HasPrefix(a, flag+"=") })
}

// planWorker derives the worker container's image, args and env. The
// user's args come first; the operator's flags follow, so where vLLM's
// argument parser sees a flag twice the operator's value wins.
func planWorker(iec *v1alpha1.InferenceEndpointConfig, o Options) workerPlan {
	port, _ := workerPort(iec)
	var p workerPlan
	var args []string
	if simulated(iec) {
		// vllm-sim takes only the flags it emulates, not the user's vLLM
		// tuning flags (tensor parallelism and the like).
		p.Image = o.SimulatorImage
		model := iec.Spec.ModelName
		if fetchesModel(iec) {
			model = modelPath(iec) // vllm-sim checks the fetched directory as vLLM would
		}
		args = []string{"--model", model, "--worker-id", "$(POD_NAME)"}
	} else {
		p.Image = iec.Spec.Worker.Image
		args = hubModelArgs(iec, slices.Clone(iec.Spec.Worker.Args))
		if !hasFlag(args, "--model") && !positionalModel(args) {
			args = append(args, "--model", modelArg(iec))
		}
	}
	args = append(args, "--port", strconv.Itoa(int(port)), "--served-model-name", iec.Spec.ModelName, "--enable-prefix-caching")
	if cachingEnabled(iec) {
		args = append(args, "--kv-transfer-config", kvConnector)
	}
	if routingEnabled(iec) && cachingEnabled(iec) && !hasFlag(args, hashAlgoFlag) {
		// A user's choice of algorithm is kept; LMCache is told the same
		// one (workerEnv), which is what lines the two tiers' events up.
		args = append(args, hashAlgoFlag, eventHashAlgo)
	}
	if routingEnabled(iec) {
		ev, err := json.Marshal(map[string]any{
			"enable_kv_cache_events": true,
			"publisher":              "zmq",
			"endpoint":               fmt.Sprintf("tcp://*:%d", KVEventsPort),
			"replay_endpoint":        fmt.Sprintf("tcp://*:%d", KVReplayPort),
			"topic":                  "kv@$(POD_NAME)@" + iec.Spec.ModelName,
		})
		if err != nil {
			panic(err) // a map of strings and a bool always marshals
		}
		args = append(args, "--kv-events-config", string(ev))
	}
	if t := iec.Spec.Tracing; t.OTLPEndpoint != "" {
		// vLLM's exporter takes the full traces URL (the OTLP/HTTP path
		// included); the protocol comes from the environment (workerEnv).
		args = append(args, "--otlp-traces-endpoint", strings.TrimSuffix(t.OTLPEndpoint, "/")+"/v1/traces")
	}
	p.Args = args
	p.Env = workerEnv(iec, o)
	return p
}

// sampleRatio is the tracing spec's share of requests traced, 0..1.
func sampleRatio(t v1alpha1.TracingSpec) string {
	return strconv.FormatFloat(float64(int32Or(t.SamplePercent, 100))/100, 'f', -1, 64)
}

func workerEnv(iec *v1alpha1.InferenceEndpointConfig, o Options) []corev1.EnvVar {
	field := func(name, fieldPath string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: fieldPath}}}
	}
	ours := []corev1.EnvVar{field("POD_NAME", "metadata.name"), {Name: "PYTHONHASHSEED", Value: HashSeed}}
	if !slices.ContainsFunc(iec.Spec.Worker.EnvironmentVariables, func(e corev1.EnvVar) bool { return e.Name == "HOME" }) {
		// The worker's uid may be unknown to the image (home "/"): its
		// caches go to an emptyDir. A HOME of the user's own wins.
		ours = append(ours, corev1.EnvVar{Name: "HOME", Value: workerHome})
	}
	if hf := iec.Spec.ModelSourceConfig.HuggingFaceModel; iec.Spec.ModelSourceConfig.ModelSourceType == v1alpha1.ModelSourceHuggingFace &&
		hf != nil && hf.TokenSecretRef != nil {
		ours = append(ours, corev1.EnvVar{Name: "HF_TOKEN", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: hf.TokenSecretRef.DeepCopy()}})
	}
	if hubCacheVolume(iec) {
		ours = append(ours, corev1.EnvVar{Name: "HF_HOME", Value: path.Join(iec.Spec.Worker.ModelVolumeMount.MountPath, ".hf-home")})
	}
	kv := iec.Spec.KVCacheSpec
	switch {
	case kv.CacheConfigFile != "":
		ours = append(ours, corev1.EnvVar{Name: "LMCACHE_CONFIG_FILE", Value: path.Join(lmcacheConfigDir, lmcacheConfigFile)})
	case cachingEnabled(iec):
		ours = append(ours,
			corev1.EnvVar{Name: "LMCACHE_CHUNK_SIZE", Value: strconv.Itoa(int(int32Or(kv.ChunkSize, 256)))},
			corev1.EnvVar{Name: "LMCACHE_LOCAL_CPU", Value: strconv.FormatBool(isTrue(kv.EnableL1Cache, true))},
			corev1.EnvVar{Name: "LMCACHE_MAX_LOCAL_CPU_SIZE", Value: strconv.Itoa(int(int32Or(kv.L1CacheSizeGB, 5)))},
		)
		if routingEnabled(iec) {
			// LMCache's own store events (its CPU tier) reach the router
			// only through vLLM's publisher, and only line up with vLLM's
			// blocks when both hash alike (LMCache PR #5076's runtime
			// requirements). The chunk size is LMCACHE_CHUNK_SIZE above;
			// kvEventsCondition checks it against vLLM's block size.
			ours = append(ours,
				corev1.EnvVar{Name: "LMCACHE_ENABLE_KV_EVENTS", Value: "true"},
				corev1.EnvVar{Name: "LMCACHE_PRE_CACHING_HASH_ALGORITHM", Value: vllmHashAlgo(iec)},
			)
		}
		if backend := l2Backend(iec); backend != "" {
			url := kv.L2CacheSpec.L2CacheLocalUrl
			if backend == v1alpha1.L2BackendTieredStorage && url == "" {
				// The tiered-storage cache server runs on every node
				// (a DaemonSet with a host port); each worker talks to
				// its own node's.
				ours = append(ours, field("HOST_IP", "status.hostIP"))
				url = fmt.Sprintf("lm://$(HOST_IP):%d", o.CacheServerPort)
			}
			if ref := kv.L2CacheSpec.PasswordSecretRef; ref != nil {
				// Declared before the URL: $(VAR) expands only variables
				// defined earlier in the list.
				ours = append(ours, corev1.EnvVar{Name: l2PasswordEnv, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: ref.DeepCopy()}})
				url = urlWithPassword(url)
			}
			serde := kv.RemoteSerde
			if serde == "" {
				serde = v1alpha1.RemoteSerdeNaive
			}
			ours = append(ours, corev1.EnvVar{Name: "LMCACHE_REMOTE_URL", Value: url}, corev1.EnvVar{Name: "LMCACHE_REMOTE_SERDE", Value: string(serde)})
		}
	}
	if t := iec.Spec.Tracing; t.OTLPEndpoint != "" {
		// vLLM exports over gRPC unless told otherwise; the spec names an
		// OTLP/HTTP collector. The sampler variables are the OpenTelemetry
		// SDK's own, which vLLM's tracer provider reads.
		ours = append(ours,
			corev1.EnvVar{Name: "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", Value: "http/protobuf"},
			corev1.EnvVar{Name: "OTEL_SERVICE_NAME", Value: workerName(iec)},
			corev1.EnvVar{Name: "OTEL_TRACES_SAMPLER", Value: "parentbased_traceidratio"},
			corev1.EnvVar{Name: "OTEL_TRACES_SAMPLER_ARG", Value: sampleRatio(t)},
		)
	}
	// Env is a map keyed by name under server-side apply: a user variable
	// the operator also sets is dropped rather than duplicated.
	env := make([]corev1.EnvVar, 0, len(iec.Spec.Worker.EnvironmentVariables)+len(ours))
	for _, e := range iec.Spec.Worker.EnvironmentVariables {
		if !slices.ContainsFunc(ours, func(o corev1.EnvVar) bool { return o.Name == e.Name }) &&
			!slices.ContainsFunc(env, func(o corev1.EnvVar) bool { return o.Name == e.Name }) {
			env = append(env, *e.DeepCopy())
		}
	}
	return append(env, ours...)
}

// urlWithPassword puts a reference to the password variable into the
// URL's user info (scheme://[user]:$(VAR)@host...), the form LMCache's
// Redis connectors read a password from. The CRD forbids a password in
// the URL itself, so any user info present is a user name.
func urlWithPassword(url string) string {
	scheme, rest, ok := strings.Cut(url, "://")
	if !ok {
		return url
	}
	var user string
	if u, host, found := strings.Cut(rest, "@"); found && !strings.ContainsAny(u, "/?#") {
		user, rest = u, host
	}
	return scheme + "://" + user + ":$(" + l2PasswordEnv + ")@" + rest
}

// workerDrainSeconds is how long a removed worker keeps serving before
// SIGTERM, for the routers to drop it (they follow EndpointSlices within
// well under a second on a healthy cluster).
const workerDrainSeconds = 5

func workerName(iec *v1alpha1.InferenceEndpointConfig) string { return iec.Name + "-worker" }

// WorkerServiceName is the headless Service the router discovers workers by.
func WorkerServiceName(iec *v1alpha1.InferenceEndpointConfig) string { return iec.Name + "-workers" }

func lmcacheConfigMapName(iec *v1alpha1.InferenceEndpointConfig) string { return iec.Name + "-lmcache" }

func workerDeployment(iec *v1alpha1.InferenceEndpointConfig, o Options) *appsv1.Deployment {
	plan := planWorker(iec, o)
	port, portName := workerPort(iec)
	w := iec.Spec.Worker
	sel := selectorLabels(iec, componentWorker)
	podLabels := labels(iec, componentWorker)
	podAnnotations := map[string]string{}

	ports := []corev1.ContainerPort{{Name: portName, ContainerPort: port, Protocol: corev1.ProtocolTCP}}
	if mp := iec.Spec.Metrics.ModelMetrics.Port; mp != 0 && mp != port {
		ports = append(ports, corev1.ContainerPort{Name: "metrics", ContainerPort: mp, Protocol: corev1.ProtocolTCP})
	}
	if routingEnabled(iec) {
		ports = append(ports,
			corev1.ContainerPort{Name: "kv-events", ContainerPort: KVEventsPort, Protocol: corev1.ProtocolTCP},
			corev1.ContainerPort{Name: "kv-replay", ContainerPort: KVReplayPort, Protocol: corev1.ProtocolTCP})
	}

	volumes := []corev1.Volume{
		{Name: "dshm", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}},
		{Name: "home", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
	}
	mounts := []corev1.VolumeMount{{Name: "dshm", MountPath: "/dev/shm"}, {Name: "home", MountPath: workerHome}}
	model := modelVolume(iec, o)
	volumes = append(volumes, model.Volumes...)
	mounts = append(mounts, model.Mounts...)
	if cfg := iec.Spec.KVCacheSpec.CacheConfigFile; cfg != "" {
		volumes = append(volumes, corev1.Volume{Name: "lmcache-config", VolumeSource: corev1.VolumeSource{
			ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: lmcacheConfigMapName(iec)}}}})
		mounts = append(mounts, corev1.VolumeMount{Name: "lmcache-config", MountPath: lmcacheConfigDir, ReadOnly: true})
		// LMCache reads its file once at start-up: a new file must roll
		// the workers.
		sum := sha256.Sum256([]byte(cfg))
		podAnnotations["inference.warmpath.io/lmcache-config-sha256"] = hex.EncodeToString(sum[:8])
	}
	for _, v := range w.Volumes {
		volumes = append(volumes, *v.DeepCopy())
	}
	for _, m := range w.VolumeMounts {
		mounts = append(mounts, *m.DeepCopy())
	}

	healthPath := iec.Spec.LoadBalancer.HealthCheckPath
	if healthPath == "" {
		healthPath = "/health"
	}
	probe := func(user *corev1.Probe, period, failures int32) *corev1.Probe {
		if user != nil {
			return user.DeepCopy()
		}
		return &corev1.Probe{
			ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Path: healthPath, Port: intstr.FromString(portName), Scheme: corev1.URISchemeHTTP,
			}},
			PeriodSeconds: period, FailureThreshold: failures, TimeoutSeconds: 5, SuccessThreshold: 1,
		}
	}

	podSC, ctrSC := workerSecurity(iec)
	c := corev1.Container{
		Name:            "vllm",
		SecurityContext: ctrSC,
		Image:           plan.Image,
		Args:            plan.Args,
		Env:             plan.Env,
		Ports:           ports,
		VolumeMounts:    mounts,
		ReadinessProbe:  probe(w.Probes.Readiness, 5, 3),
		LivenessProbe:   probe(w.Probes.Liveness, 10, 3),
		// Loading weights takes minutes: up to 20 before liveness applies.
		StartupProbe: probe(w.Probes.Startup, 10, 120),
		// A removed pod is marked terminating in its EndpointSlice and sent
		// SIGTERM at the same moment; the routers need a moment to see the
		// former. Serving on meanwhile keeps the requests they send it from
		// meeting a closed socket (a kubelet sleep: no shell in the image).
		Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: workerDrainSeconds}}},
	}
	if !simulated(iec) {
		c.Command = slices.Clone(w.Command)
		c.Resources = workerResources(iec)
	} else {
		// The simulator needs no GPU: requesting one would leave it
		// unschedulable on the CPU-only clusters simulate is for.
		c.Resources = corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")}}
	}
	if len(podAnnotations) == 0 {
		podAnnotations = nil
	}
	pod := corev1.PodSpec{
		SecurityContext: podSC,
		InitContainers:  model.InitContainers,
		Containers:      []corev1.Container{c},
		Volumes:         volumes,
		// Let in-flight generations finish on scale-down.
		TerminationGracePeriodSeconds: ptr.To(int64(60)),
	}
	schedulePod(&pod, workerScheduling(iec), sel)
	return &appsv1.Deployment{
		ObjectMeta: objectMeta(iec, workerName(iec), componentWorker),
		Spec: appsv1.DeploymentSpec{
			Replicas: workerReplicas(iec),
			Selector: &metav1.LabelSelector{MatchLabels: sel},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: podLabels, Annotations: podAnnotations},
				Spec:       pod,
			},
		},
	}
}

// workerReplicas is the worker Deployment's replicas as the operator
// applies it: spec.replicas, or nothing while an autoscaler owns the count
// (an apply naming the field would take it back).
func workerReplicas(iec *v1alpha1.InferenceEndpointConfig) *int32 {
	if autoscaling(iec) != nil {
		return nil
	}
	return ptr.To(int32Or(iec.Spec.Replicas, 1))
}

// replicasNote says who sets the worker count, for events.
func replicasNote(iec *v1alpha1.InferenceEndpointConfig) string {
	if as := autoscaling(iec); as != nil {
		lo, hi := int32Or(as.MinReplicaCount, 1), int32Or(as.MaxReplicaCount, 5)
		return fmt.Sprintf("%d-%d replicas, autoscaled", lo, hi)
	}
	return fmt.Sprintf("%d replicas", int32Or(iec.Spec.Replicas, 1))
}

func workerService(iec *v1alpha1.InferenceEndpointConfig) *corev1.Service {
	port, portName := workerPort(iec)
	ports := []corev1.ServicePort{{Name: portName, Port: port, TargetPort: intstr.FromString(portName), Protocol: corev1.ProtocolTCP}}
	if mp := iec.Spec.Metrics.ModelMetrics.Port; mp != 0 && mp != port {
		ports = append(ports, corev1.ServicePort{Name: "metrics", Port: mp, TargetPort: intstr.FromString("metrics"), Protocol: corev1.ProtocolTCP})
	}
	if routingEnabled(iec) {
		ports = append(ports,
			corev1.ServicePort{Name: "kv-events", Port: KVEventsPort, TargetPort: intstr.FromString("kv-events"), Protocol: corev1.ProtocolTCP},
			corev1.ServicePort{Name: "kv-replay", Port: KVReplayPort, TargetPort: intstr.FromString("kv-replay"), Protocol: corev1.ProtocolTCP})
	}
	return &corev1.Service{
		ObjectMeta: objectMeta(iec, WorkerServiceName(iec), componentWorker),
		Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone,
			Selector:  selectorLabels(iec, componentWorker),
			Ports:     ports,
		},
	}
}

func workerPDB(iec *v1alpha1.InferenceEndpointConfig) *policyv1.PodDisruptionBudget {
	return disruptionBudget(iec, workerName(iec), componentWorker)
}

// disruptionBudget lets voluntary disruptions take one of a component's
// pods at a time. maxUnavailable 1 fits any replica count, where
// minAvailable would have to follow it (and minAvailable 1 of 1 blocks a
// node drain for ever); a pod that is not Ready is evictable regardless
// (AlwaysAllow), so a crash-looping pod cannot block a drain either.
func disruptionBudget(iec *v1alpha1.InferenceEndpointConfig, name, component string) *policyv1.PodDisruptionBudget {
	return &policyv1.PodDisruptionBudget{
		ObjectMeta: objectMeta(iec, name, component),
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable:             ptr.To(intstr.FromInt32(1)),
			Selector:                   &metav1.LabelSelector{MatchLabels: selectorLabels(iec, component)},
			UnhealthyPodEvictionPolicy: ptr.To(policyv1.AlwaysAllow),
		},
	}
}

func lmcacheConfigMap(iec *v1alpha1.InferenceEndpointConfig) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: objectMeta(iec, lmcacheConfigMapName(iec), componentWorker),
		Data:       map[string]string{lmcacheConfigFile: iec.Spec.KVCacheSpec.CacheConfigFile},
	}
}
