package controller

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/warmpath/warmpath/services/operator/api/v1alpha1"
)

// l1Cases are KV cache specs and the L1 size in tokens the router is given.
var l1Cases = []struct {
	name string
	kv   v1alpha1.KVCacheSpec
	want int64 // tokens; 0: not set
}{
	{"model KV size unknown", v1alpha1.KVCacheSpec{L1CacheSizeGB: ptr.To[int32](5)}, 0},
	{"default L1 of 5 GB, 8B model", v1alpha1.KVCacheSpec{KVBytesPerToken: ptr.To[int64](131072)}, 38146},
	{"L1 of 20 GB", v1alpha1.KVCacheSpec{KVBytesPerToken: ptr.To[int64](131072), L1CacheSizeGB: ptr.To[int32](20)}, 152587},
	{"L1 off", v1alpha1.KVCacheSpec{KVBytesPerToken: ptr.To[int64](131072), EnableL1Cache: ptr.To(false)}, 0},
}

// TestRouterArgsBoundTheL1View: the router keeps its view of each
// worker's store-only L1 within the L1's size, in LMCache's chunks.
func TestRouterArgsBoundTheL1View(t *testing.T) {
	for _, tt := range l1Cases {
		t.Run(tt.name, func(t *testing.T) {
			iec := &v1alpha1.InferenceEndpointConfig{}
			iec.Spec.KVCacheSpec = tt.kv
			iec.Spec.KVCacheSpec.ChunkSize = ptr.To[int32](512)
			args := strings.Join(routerArgs(iec, Options{}), " ")
			for _, want := range []string{"--kv-cpu-events=store-only", "--kv-cpu-chunk-tokens=512"} {
				if !strings.Contains(args, want) {
					t.Errorf("router args %s lack %s", args, want)
				}
			}
			capacity := "--kv-cpu-capacity-tokens="
			if tt.want > 0 {
				capacity += strconv.FormatInt(tt.want, 10)
			}
			if strings.Contains(args, capacity) != (tt.want > 0) {
				t.Errorf("router args %s: want capacity %d", args, tt.want)
			}
		})
	}
}

// TestRouterArgsFollowTheCacheServers: a tieredstorage endpoint's router
// follows the node-local cache servers' KV events, found by the peers
// name the operator is given, hashing chunks as the workers do; an L2
// it is not told about, or one at the user's own address, is not.
func TestRouterArgsFollowTheCacheServers(t *testing.T) {
	dns := Options{CacheServerDNS: "warmpath-cacheserver-peers.warmpath.svc", CacheServerSnapshotPort: 5558, CacheServerEventsPort: 5557}
	l2 := func(backend v1alpha1.L2Backend, url string) v1alpha1.KVCacheSpec {
		return v1alpha1.KVCacheSpec{EnableL2Cache: ptr.To(true), ChunkSize: ptr.To[int32](512),
			L2CacheSpec: &v1alpha1.L2CacheSpec{L2CacheBackend: backend, L2CacheLocalUrl: url}}
	}
	tests := []struct {
		name   string
		kv     v1alpha1.KVCacheSpec
		o      Options
		follow bool
	}{
		{"tieredstorage, peers named", l2(v1alpha1.L2BackendTieredStorage, ""), dns, true},
		{"tieredstorage in capitals", l2("TieredStorage", ""), dns, true},
		{"tieredstorage, peers not named", l2(v1alpha1.L2BackendTieredStorage, ""), Options{}, false},
		{"tieredstorage at the user's address", l2(v1alpha1.L2BackendTieredStorage, "lm://cache.example:65432"), dns, false},
		{"redis", l2(v1alpha1.L2BackendRedis, "redis://redis:6379"), dns, false},
		{"no L2", v1alpha1.KVCacheSpec{}, dns, false},
	}
	want := []string{"--l2-dns-name=warmpath-cacheserver-peers.warmpath.svc", "--l2-dns-http-port=5558", "--l2-dns-events-port=5557",
		"--l2-hash-seed=" + HashSeed, "--l2-chunk-tokens=512"}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			iec := &v1alpha1.InferenceEndpointConfig{}
			iec.Spec.KVCacheSpec = tt.kv
			args := routerArgs(iec, tt.o)
			for _, w := range want {
				if slices.Contains(args, w) != tt.follow {
					t.Errorf("router args %v: has %s = %v, want %v", args, w, !tt.follow, tt.follow)
				}
			}
		})
	}
}

func TestRouterConfigCountsL1ForPrefixAware(t *testing.T) {
	for _, tt := range l1Cases {
		t.Run(tt.name, func(t *testing.T) {
			iec := &v1alpha1.InferenceEndpointConfig{}
			iec.Spec.KVCacheSpec = tt.kv
			out := routerConfigYAML(iec)
			var got struct {
				Strategy    string `json:"strategy"`
				PrefixAware *struct {
					OffloadCapacityTokens int64 `json:"offloadCapacityTokens"`
				} `json:"prefixAware"`
			}
			if err := yaml.UnmarshalStrict([]byte(out), &got); err != nil {
				t.Fatalf("router config %q: %v", out, err)
			}
			switch {
			case tt.want == 0 && got.PrefixAware != nil:
				t.Errorf("config sets prefixAware without an L1 size to count:\n%s", out)
			case tt.want != 0 && (got.PrefixAware == nil || got.PrefixAware.OffloadCapacityTokens != tt.want):
				t.Errorf("config\n%s\nwant offloadCapacityTokens %d", out, tt.want)
			}
			if got.Strategy != string(v1alpha1.StrategyPrefixAware) || strings.Contains(out, "null") {
				t.Errorf("config\n%s\nwant strategy prefixaware and no nulls", out)
			}
		})
	}
}

// TestRouterAPIKeysFromSecret: apiKeySecretRef becomes a Secret volume
// holding the named key as a file the router rereads (--api-key-file), so
// keys rotate with the Secret; without it the router asks for no key.
func TestRouterAPIKeysFromSecret(t *testing.T) {
	for _, ref := range []*corev1.SecretKeySelector{nil, {LocalObjectReference: corev1.LocalObjectReference{Name: "router-keys"}, Key: "keys"}} {
		iec := &v1alpha1.InferenceEndpointConfig{}
		iec.Name, iec.Namespace = "e", "ns"
		iec.Spec.IntelligentRoutingSpec.APIKeySecretRef = ref
		pod := routerDeployment(iec, Options{RouterImage: "router"}).Spec.Template.Spec
		c := pod.Containers[0]
		hasArg := slices.Contains(c.Args, "--api-key-file=/etc/warmpath/router-auth/api-keys")
		var vol *corev1.Volume
		for i := range pod.Volumes {
			if pod.Volumes[i].Name == "api-keys" {
				vol = &pod.Volumes[i]
			}
		}
		mounted := slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
			return m.Name == "api-keys" && m.MountPath == "/etc/warmpath/router-auth" && m.ReadOnly
		})
		if ref == nil {
			if hasArg || vol != nil || mounted {
				t.Errorf("no apiKeySecretRef, yet args %v, volumes %v", c.Args, pod.Volumes)
			}
			continue
		}
		if !hasArg || !mounted || vol == nil || vol.Secret == nil || vol.Secret.SecretName != "router-keys" ||
			len(vol.Secret.Items) != 1 || vol.Secret.Items[0].Key != "keys" || vol.Secret.Items[0].Path != "api-keys" {
			t.Errorf("apiKeySecretRef %+v: args %v, mounts %v, volume %+v", ref, c.Args, c.VolumeMounts, vol)
		}
	}
}

// TestRouterTLSFromSecret: tlsSecretName (with routing on) makes the router
// serve TLS from the Secret's files, probed over HTTPS, behind a Service on
// 443 with an https status URL and a ServiceMonitor scraping over TLS;
// without it, or without routing, all stays plain HTTP on 80.
func TestRouterTLSFromSecret(t *testing.T) {
	for _, tt := range []struct {
		name    string
		secret  string
		routing bool
		tls     bool
	}{
		{"tls", "router-cert", true, true},
		{"no secret", "", true, false},
		{"routing off", "router-cert", false, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			iec := &v1alpha1.InferenceEndpointConfig{}
			iec.Name, iec.Namespace = "e", "ns"
			iec.Spec.IntelligentRoutingSpec.Enabled = ptr.To(tt.routing)
			iec.Spec.IntelligentRoutingSpec.TLSSecretName = tt.secret
			pod := routerDeployment(iec, Options{RouterImage: "router"}).Spec.Template.Spec
			c := pod.Containers[0]
			hasArgs := slices.Contains(c.Args, "--tls-cert-file=/etc/warmpath/router-tls/tls.crt") &&
				slices.Contains(c.Args, "--tls-key-file=/etc/warmpath/router-tls/tls.key")
			probeHTTPS := c.ReadinessProbe.HTTPGet.Scheme == corev1.URISchemeHTTPS && c.LivenessProbe.HTTPGet.Scheme == corev1.URISchemeHTTPS
			mounted := slices.ContainsFunc(pod.Volumes, func(v corev1.Volume) bool {
				return v.Secret != nil && v.Secret.SecretName == "router-cert" && len(v.Secret.Items) == 2
			})
			svc := frontService(iec).Spec.Ports[0]
			base, _ := endpointURL(iec)
			eps, _, _ := unstructured.NestedSlice(routerServiceMonitor(iec).Object, "spec", "endpoints")
			scrapeTLS := eps[0].(map[string]any)["scheme"] == "https"
			got := []bool{hasArgs, probeHTTPS, mounted, svc.Port == 443 && svc.Name == "https", strings.HasPrefix(base, "https://"), scrapeTLS}
			for i, g := range got {
				if g != tt.tls {
					t.Errorf("check %d (args, probes, volume, service, URL, scrape) = %v, want %v: args %v, service %+v, URL %s", i, g, tt.tls, c.Args, svc, base)
				}
			}
		})
	}
}

// TestTracingReachesRouterAndWorkers: tracing.otlpEndpoint sends the
// router's spans to the collector's OTLP/HTTP URL and the workers' to its
// /v1/traces, over http/protobuf (vLLM's default is gRPC), each sampled at
// samplePercent; without it neither traces.
func TestTracingReachesRouterAndWorkers(t *testing.T) {
	for _, tt := range []struct {
		name     string
		endpoint string
		percent  *int32
		ratio    string
	}{
		{"off", "", nil, ""},
		{"all", "http://otel-collector.obs:4318", nil, "1"},
		{"a tenth, trailing slash", "http://otel-collector.obs:4318/", ptr.To[int32](10), "0.1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			iec := &v1alpha1.InferenceEndpointConfig{}
			iec.Name, iec.Namespace = "e", "ns"
			iec.Spec.ModelName = "m"
			iec.Spec.Tracing = v1alpha1.TracingSpec{OTLPEndpoint: tt.endpoint, SamplePercent: tt.percent}
			router := routerDeployment(iec, Options{RouterImage: "router"}).Spec.Template.Spec.Containers[0]
			worker := workerDeployment(iec, Options{}).Spec.Template.Spec.Containers[0]
			env := map[string]string{}
			for _, e := range worker.Env {
				env[e.Name] = e.Value
			}
			at := slices.Index(worker.Args, "--otlp-traces-endpoint")
			if tt.endpoint == "" {
				if slices.ContainsFunc(router.Args, func(a string) bool { return strings.HasPrefix(a, "--otlp-endpoint") }) || at >= 0 || env["OTEL_SERVICE_NAME"] != "" {
					t.Fatalf("tracing off, yet router args %v, worker args %v, env %v", router.Args, worker.Args, env)
				}
				return
			}
			if !slices.Contains(router.Args, "--otlp-endpoint="+tt.endpoint) || !slices.Contains(router.Args, "--trace-sample-ratio="+tt.ratio) {
				t.Errorf("router args %v: want the endpoint and ratio %s", router.Args, tt.ratio)
			}
			if at < 0 || at+1 >= len(worker.Args) || worker.Args[at+1] != "http://otel-collector.obs:4318/v1/traces" {
				t.Errorf("worker args %v: want --otlp-traces-endpoint http://otel-collector.obs:4318/v1/traces", worker.Args)
			}
			want := map[string]string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf", "OTEL_SERVICE_NAME": "e-worker",
				"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": tt.ratio}
			for k, v := range want {
				if env[k] != v {
					t.Errorf("worker env %s = %q, want %q", k, env[k], v)
				}
			}
		})
	}
}
