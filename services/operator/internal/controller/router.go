package controller

import (
	"fmt"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/warmpath/warmpath/libs/fleetlimit"
	v1alpha1 "github.com/warmpath/warmpath/services/operator/api/v1alpha1"
)

const (
	routerPort       = 8080
	routerConfigDir  = "/etc/warmpath/router"
	routerConfigFile = "config.yaml"
	// routerAuthDir holds apiKeySecretRef's key as routerAPIKeysFile.
	routerAuthDir     = "/etc/warmpath/router-auth"
	routerAPIKeysFile = "api-keys"
	// routerTLSDir holds tlsSecretName's certificate and key.
	routerTLSDir = "/etc/warmpath/router-tls"
	// RouterConfigKey is the router ConfigMap's key holding its routing
	// configuration (services/router/internal/config.File).
	RouterConfigKey = routerConfigFile
)

// A replaced router pod drains for routerDrainSeconds (readiness fails,
// each response closes its connection, new connections are still served)
// while its removal from the endpoint Service reaches kube-proxy and any
// ingress, then gives requests in flight routerShutdownGraceSeconds. The
// pod's grace covers both, with a margin for the process to exit before
// SIGKILL.
const (
	routerDrainSeconds         = 5
	routerShutdownGraceSeconds = 50
	routerTerminationSeconds   = routerDrainSeconds + routerShutdownGraceSeconds + 5
)

func routerName(iec *v1alpha1.InferenceEndpointConfig) string { return iec.Name + "-router" }

// routerConfig mirrors the part of the router's configuration file
// (services/router/internal/config.File) the operator sets. The router
// rejects unknown fields, so only fields it reads appear here.
type routerConfig struct {
	Strategy      v1alpha1.RoutingStrategy `json:"strategy"`
	PrefixAware   *routerPrefixAware       `json:"prefixAware,omitempty"`
	Session       *routerSession           `json:"session,omitempty"`
	RequestLimits *routerRequestLimits     `json:"requestLimits,omitempty"`
}

type routerPrefixAware struct {
	OffloadCapacityTokens int64 `json:"offloadCapacityTokens"`
}

type routerSession struct {
	Headers []string `json:"headers"`
}

type routerRequestLimits struct {
	MaxConcurrentRequests int `json:"maxConcurrentRequests"`
	MaxQueueSize          int `json:"maxQueueSize"`
	OverflowStatusCode    int `json:"overflowStatusCode,omitempty"`
}

func routerConfigYAML(iec *v1alpha1.InferenceEndpointConfig) string {
	rs := iec.Spec.IntelligentRoutingSpec
	c := routerConfig{Strategy: rs.RoutingStrategy}
	if c.Strategy == "" {
		c.Strategy = v1alpha1.StrategyPrefixAware
	}
	if len(rs.SessionHeaders) > 0 {
		c.Session = &routerSession{Headers: rs.SessionHeaders}
	}
	if t := offloadCapacityTokens(iec.Spec.KVCacheSpec); t > 0 {
		c.PrefixAware = &routerPrefixAware{OffloadCapacityTokens: t}
	}
	if l := iec.Spec.Worker.RequestLimits; l != nil {
		n := int32Or(rs.RouterReplicas, 1)
		c.RequestLimits = &routerRequestLimits{
			MaxConcurrentRequests: perRouter(l.MaxConcurrentRequests, n), MaxQueueSize: perRouter(l.MaxQueueSize, n),
			OverflowStatusCode: int(l.OverflowStatusCode),
		}
	}
	b, err := yaml.Marshal(c)
	if err != nil {
		panic(err) // plain strings and ints always marshal
	}
	return string(b)
}

// perRouter is one router's share of an endpoint-wide limit among n
// routers (fleetlimit.PerReplica: rounded down, at least 1, 0 stays 0).
func perRouter(limit, n int32) int {
	return int(fleetlimit.PerReplica(limit, n))
}

// offloadCapacityTokens is what each worker's LMCache L1 holds, in tokens,
// when the spec says both its size and the model's KV bytes per token; 0
// otherwise (prefixaware then counts the GPU cache alone).
func offloadCapacityTokens(kv v1alpha1.KVCacheSpec) int64 {
	if kv.KVBytesPerToken == nil || *kv.KVBytesPerToken <= 0 || (kv.EnableL1Cache != nil && !*kv.EnableL1Cache) {
		return 0
	}
	gb := int64(5) // LMCache's max_local_cpu_size default, as the CRD's
	if kv.L1CacheSizeGB != nil {
		gb = int64(*kv.L1CacheSizeGB)
	}
	// GB as 10^9 bytes: if LMCache counts GiB, this undercounts by 7%,
	// which only makes prefixaware forget a little early.
	return gb * 1_000_000_000 / *kv.KVBytesPerToken
}

func routerConfigMap(iec *v1alpha1.InferenceEndpointConfig) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: objectMeta(iec, routerName(iec), componentRouter),
		Data:       map[string]string{RouterConfigKey: routerConfigYAML(iec)},
	}
}

// routerArgs are the router's flags (services/router/cmd/router). The
// ConfigMap is mounted as a directory, which the router watches: a
// strategy change reaches it without a restart.
func routerArgs(iec *v1alpha1.InferenceEndpointConfig, o Options) []string {
	_, portName := workerPort(iec)
	args := []string{
		fmt.Sprintf("--listen=0.0.0.0:%d", routerPort),
		"--k8s-namespace=" + iec.Namespace,
		"--k8s-selector=kubernetes.io/service-name=" + WorkerServiceName(iec),
		"--k8s-port=" + portName,
		"--config=" + routerConfigDir + "/" + routerConfigFile,
		// Workers publish KV events whenever routing is on, so kvaware can
		// be switched on live; the router subscribes to each pod directly.
		fmt.Sprintf("--kv-events-endpoint=tcp://{host}:%d", KVEventsPort),
		fmt.Sprintf("--kv-events-replay-endpoint=tcp://{host}:%d", KVReplayPort),
		"--log-format=json",
		fmt.Sprintf("--drain-delay=%ds", routerDrainSeconds),
		fmt.Sprintf("--shutdown-grace=%ds", routerShutdownGraceSeconds),
	}
	// LMCache (>= 0.4.3, which the KVEventsUsable condition asks for)
	// announces the chunks it stores in CPU RAM but never their eviction:
	// the router keeps its view of each worker's L1 within the L1's size,
	// in tokens, and in LMCache's chunks.
	args = append(args, "--kv-cpu-events=store-only",
		"--kv-cpu-chunk-tokens="+strconv.Itoa(int(int32Or(iec.Spec.KVCacheSpec.ChunkSize, 256))))
	if t := offloadCapacityTokens(iec.Spec.KVCacheSpec); t > 0 {
		args = append(args, "--kv-cpu-capacity-tokens="+strconv.FormatInt(t, 10))
	}
	// The node-local tiered-storage cache servers publish what they hold:
	// the router follows every one the peers name resolves to, with the
	// workers' hash seed and chunk size, so that the chunk hashes agree.
	// An L2 at an address of the user's own (l2CacheLocalUrl) is not
	// known to publish anything.
	if l2Backend(iec) == v1alpha1.L2BackendTieredStorage && iec.Spec.KVCacheSpec.L2CacheSpec.L2CacheLocalUrl == "" && o.CacheServerDNS != "" {
		args = append(args,
			"--l2-dns-name="+o.CacheServerDNS,
			"--l2-dns-http-port="+strconv.Itoa(o.CacheServerSnapshotPort),
			"--l2-dns-events-port="+strconv.Itoa(o.CacheServerEventsPort),
			"--l2-hash-seed="+HashSeed,
			"--l2-chunk-tokens="+strconv.Itoa(int(int32Or(iec.Spec.KVCacheSpec.ChunkSize, 256))))
	}
	if routerPeered(iec) {
		// Several routers agree on where a prompt's cache is by relaying
		// each request to the replica that owns its head (docs/router.md,
		// "Router replicas"); they find each other as the peers Service's
		// ready pods, and each knows itself by its pod IP.
		args = append(args, "--peers-dns-name="+routerPeersName(iec)+"."+iec.Namespace+".svc",
			fmt.Sprintf("--peers-dns-port=%d", routerPort), fmt.Sprintf("--peer-self=http://$(POD_IP):%d", routerPort))
	}
	if iec.Spec.IntelligentRoutingSpec.APIKeySecretRef != nil {
		args = append(args, "--api-key-file="+routerAuthDir+"/"+routerAPIKeysFile)
	}
	if routerTLS(iec) {
		args = append(args, "--tls-cert-file="+routerTLSDir+"/tls.crt", "--tls-key-file="+routerTLSDir+"/tls.key")
	}
	if t := iec.Spec.Tracing; t.OTLPEndpoint != "" {
		args = append(args, "--otlp-endpoint="+t.OTLPEndpoint, "--trace-sample-ratio="+sampleRatio(t))
	}
	return args
}

// mountSecret mounts items of the Secret secret read-only at dir in pod's
// first container, as volume name.
func mountSecret(pod *corev1.PodSpec, name, dir, secret string, items ...corev1.KeyToPath) {
	c := &pod.Containers[0]
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: name, MountPath: dir, ReadOnly: true})
	pod.Volumes = append(pod.Volumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
		Secret: &corev1.SecretVolumeSource{SecretName: secret, Items: items},
	}})
}

func routerDeployment(iec *v1alpha1.InferenceEndpointConfig, o Options) *appsv1.Deployment {
	scheme := corev1.URISchemeHTTP
	if routerTLS(iec) {
		scheme = corev1.URISchemeHTTPS // the kubelet does not verify the certificate
	}
	httpProbe := func(path string, period int32) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromString("http"), Scheme: scheme}},
			PeriodSeconds: period, TimeoutSeconds: 2, FailureThreshold: 3, SuccessThreshold: 1,
		}
	}
	sel := selectorLabels(iec, componentRouter)
	pod := corev1.PodSpec{
		ServiceAccountName: routerName(iec),
		SecurityContext:    podSecurity(scratchUID),
		Containers: []corev1.Container{{
			Name:            "router",
			Image:           o.RouterImage,
			Args:            routerArgs(iec, o),
			Env:             routerEnv(iec),
			SecurityContext: containerSecurity(true),
			Resources:       routerResources(iec),
			Ports:           []corev1.ContainerPort{{Name: "http", ContainerPort: routerPort, Protocol: corev1.ProtocolTCP}},
			VolumeMounts: []corev1.VolumeMount{{
				Name: "config", MountPath: routerConfigDir, ReadOnly: true,
			}},
			// /ready is 503 until the router has a healthy worker, so the
			// Service only sends it traffic it can serve.
			ReadinessProbe: httpProbe("/ready", 2),
			LivenessProbe:  httpProbe("/health", 10),
		}},
		Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{
			ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: routerName(iec)}},
		}}},
		TerminationGracePeriodSeconds: ptr.To(int64(routerTerminationSeconds)),
	}
	// Secret volumes, not environment variables: the kubelet swaps in a
	// changed Secret, and the router rereads its files (routerArgs).
	if ref := iec.Spec.IntelligentRoutingSpec.APIKeySecretRef; ref != nil {
		mountSecret(&pod, "api-keys", routerAuthDir, ref.Name, corev1.KeyToPath{Key: ref.Key, Path: routerAPIKeysFile})
	}
	if routerTLS(iec) {
		mountSecret(&pod, "tls", routerTLSDir, iec.Spec.IntelligentRoutingSpec.TLSSecretName,
			corev1.KeyToPath{Key: corev1.TLSCertKey, Path: "tls.crt"}, corev1.KeyToPath{Key: corev1.TLSPrivateKeyKey, Path: "tls.key"})
	}
	schedulePod(&pod, iec.Spec.IntelligentRoutingSpec.RouterScheduling, sel)
	return &appsv1.Deployment{
		ObjectMeta: objectMeta(iec, routerName(iec), componentRouter),
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32Or(iec.Spec.IntelligentRoutingSpec.RouterReplicas, 1)),
			Selector: &metav1.LabelSelector{MatchLabels: sel},
			// A new router pod is Ready (it has a healthy worker) before
			// an old one starts draining: a single router is never gone.
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType, RollingUpdate: &appsv1.RollingUpdateDeployment{
				MaxUnavailable: ptr.To(intstr.FromInt32(0)), MaxSurge: ptr.To(intstr.FromInt32(1)),
			}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels(iec, componentRouter)},
				Spec:       pod,
			},
		},
	}
}

// routerPeered says the routers relay requests to each other: with more
// than one replica, over plain HTTP (a replica relaying to a TLS-serving
// peer would need the endpoint's CA; with tlsSecretName each replica
// routes alone, docs/operator.md).
func routerPeered(iec *v1alpha1.InferenceEndpointConfig) bool {
	return int32Or(iec.Spec.IntelligentRoutingSpec.RouterReplicas, 1) > 1 && !routerTLS(iec)
}

// routerPeersName is the headless Service the router replicas find each
// other by.
func routerPeersName(iec *v1alpha1.InferenceEndpointConfig) string { return routerName(iec) + "-peers" }

// routerPeersService resolves to the ready router pods: a replica that
// drains leaves it, so the others stop relaying to it.
func routerPeersService(iec *v1alpha1.InferenceEndpointConfig) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: objectMeta(iec, routerPeersName(iec), componentRouter),
		Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone,
			Selector:  selectorLabels(iec, componentRouter),
			Ports:     []corev1.ServicePort{{Name: "http", Port: routerPort, TargetPort: intstr.FromString("http"), Protocol: corev1.ProtocolTCP}},
		},
	}
}

// routerPDB lets voluntary disruptions (node drains) take one router at a
// time (disruptionBudget).
func routerPDB(iec *v1alpha1.InferenceEndpointConfig) *policyv1.PodDisruptionBudget {
	return disruptionBudget(iec, routerName(iec), componentRouter)
}

// frontService is the endpoint's stable address, <name>: it selects the
// router when routing is enabled and the workers otherwise, so enabling
// routing later does not change the URL clients use.
func frontService(iec *v1alpha1.InferenceEndpointConfig) *corev1.Service {
	target, component := "http", componentRouter
	if !routingEnabled(iec) {
		_, target = workerPort(iec)
		component = componentWorker
	}
	name, port := frontPort(iec)
	meta := objectMeta(iec, iec.Name, componentFront)
	return &corev1.Service{
		ObjectMeta: meta,
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeClusterIP,
			Selector: selectorLabels(iec, component),
			Ports:    []corev1.ServicePort{{Name: name, Port: port, TargetPort: intstr.FromString(target), Protocol: corev1.ProtocolTCP}},
		},
	}
}

// frontPort is the endpoint Service's one port, which the Ingress and
// HTTPRoute point at too: https/443 when the router serves TLS, http/80
// otherwise.
func frontPort(iec *v1alpha1.InferenceEndpointConfig) (string, int32) {
	if routerTLS(iec) {
		return "https", 443
	}
	return "http", 80
}

// routerTLS says the router serves clients over TLS (tlsSecretName, with
// routing on).
func routerTLS(iec *v1alpha1.InferenceEndpointConfig) bool {
	return routingEnabled(iec) && iec.Spec.IntelligentRoutingSpec.TLSSecretName != ""
}

func routerServiceAccount(iec *v1alpha1.InferenceEndpointConfig) *corev1.ServiceAccount {
	return &corev1.ServiceAccount{ObjectMeta: objectMeta(iec, routerName(iec), componentRouter)}
}

func routerRole(iec *v1alpha1.InferenceEndpointConfig) *rbacv1.Role {
	return &rbacv1.Role{
		ObjectMeta: objectMeta(iec, routerName(iec), componentRouter),
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"get", "list", "watch"},
		}},
	}
}

func routerRoleBinding(iec *v1alpha1.InferenceEndpointConfig) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{
		ObjectMeta: objectMeta(iec, routerName(iec), componentRouter),
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: routerName(iec)},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: routerName(iec), Namespace: iec.Namespace}},
	}
}

// endpointURL is the in-cluster base URL and the full invocation URL.
func endpointURL(iec *v1alpha1.InferenceEndpointConfig) (string, string) {
	scheme := "http"
	if routerTLS(iec) {
		scheme = "https"
	}
	base := fmt.Sprintf("%s://%s.%s.svc", scheme, iec.Name, iec.Namespace)
	ep := strings.TrimPrefix(iec.Spec.InvocationEndpoint, "/")
	if ep == "" {
		ep = "v1/chat/completions"
	}
	return base, base + "/" + ep
}
