package controller

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/warmpath/warmpath/services/operator/api/v1alpha1"
)

func TestLMCacheRelease(t *testing.T) {
	tests := []struct {
		image string
		want  [3]int
		ok    bool
	}{
		{"lmcache/vllm-openai:v0.5.5", [3]int{0, 5, 5}, true},
		{"lmcache/vllm-openai:v0.3.9", [3]int{0, 3, 9}, true},
		{"docker.io/lmcache/vllm-openai:v0.4.3-cu129", [3]int{0, 4, 3}, true},
		{"lmcache/vllm-openai:v0.4.5-lightweight", [3]int{0, 4, 5}, true},
		{"lmcache/vllm-openai:v0.3.10.post2", [3]int{0, 3, 10}, true},
		{"lmcache/vllm-openai:v0.5.5@sha256:59b3", [3]int{0, 5, 5}, true},
		{"lmcache/vllm-openai:latest", [3]int{}, false},
		{"lmcache/vllm-openai:lightweight", [3]int{}, false},
		{"lmcache/vllm-openai:test", [3]int{}, false},
		{"lmcache/vllm-openai", [3]int{}, false},
		{"lmcache/vllm-openai@sha256:59b3", [3]int{}, false},
		{"lmcache/vllm-openai:v1.2", [3]int{}, false},
		{"vllm/vllm-openai:v0.19.1", [3]int{}, false},
		{"registry.example.com:5000/lmcache/vllm-openai:v0.5.5", [3]int{}, false}, // a mirror may rebuild the image
		{"lmcache/standalone:v0.5.5", [3]int{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.image, func(t *testing.T) {
			got, ok := lmcacheRelease(tt.image)
			if ok != tt.ok || (ok && got != tt.want) {
				t.Errorf("lmcacheRelease(%q) = %v, %v; want %v, %v", tt.image, got, ok, tt.want, tt.ok)
			}
		})
	}
}

// kvaware is a routed kvaware endpoint on a GPU image with the L1 on.
func kvaware(image string, args ...string) *v1alpha1.InferenceEndpointConfig {
	return &v1alpha1.InferenceEndpointConfig{Spec: v1alpha1.InferenceEndpointConfigSpec{
		ModelName: "llama",
		ModelSourceConfig: v1alpha1.ModelSourceConfig{
			ModelSourceType: v1alpha1.ModelSourceHuggingFace, HuggingFaceModel: &v1alpha1.HuggingFaceModel{ModelID: "org/m"},
		},
		IntelligentRoutingSpec: v1alpha1.IntelligentRoutingSpec{Enabled: ptr.To(true), RoutingStrategy: v1alpha1.StrategyKVAware},
		Worker:                 v1alpha1.WorkerSpec{Image: image, Args: args},
	}}
}

func TestKVEventsCondition(t *testing.T) {
	const good = "lmcache/vllm-openai:v0.5.5"
	edit := func(iec *v1alpha1.InferenceEndpointConfig, f func(*v1alpha1.InferenceEndpointConfig)) *v1alpha1.InferenceEndpointConfig {
		f(iec)
		return iec
	}
	tests := []struct {
		name   string
		iec    *v1alpha1.InferenceEndpointConfig
		status metav1.ConditionStatus // "": no condition
		reason string
		msg    string // a substring of the message
	}{
		{"events line up", kvaware(good), metav1.ConditionTrue, ReasonEventsLineUp, "chunk 256 = 16 vLLM blocks of 16, hash sha256_cbor"},
		{"the first release kvaware accepts", kvaware("lmcache/vllm-openai:v0.4.3"), metav1.ConditionTrue, ReasonEventsLineUp, "LMCache 0.4.3"},
		{"chart's old default", kvaware("lmcache/vllm-openai:v0.3.9"), metav1.ConditionFalse, ReasonLMCacheTooOld, "LMCache 0.3.9, older than 0.4.3"},
		{"just too old", kvaware("docker.io/lmcache/vllm-openai:v0.4.2-cu129"), metav1.ConditionFalse, ReasonLMCacheTooOld, "0.4.2"},
		{"release not in the tag", kvaware("lmcache/vllm-openai:latest"), metav1.ConditionUnknown, ReasonUnknownWorkerImage, "cannot be read from its tag"},
		{"another image", kvaware("registry.example.com/team/vllm:2026-11"), metav1.ConditionUnknown, ReasonUnknownWorkerImage, "registry.example.com/team/vllm:2026-11"},
		{"bigger block still divides the chunk", kvaware(good, "--block-size", "128"), metav1.ConditionTrue, ReasonEventsLineUp, "chunk 256 = 2 vLLM blocks of 128"},
		{"chunk not a multiple of the block", kvaware(good, "--block-size=48"),
			metav1.ConditionFalse, ReasonChunkSizeMismatch, "chunk size 256 is not a multiple of vLLM's block size 48"},
		{"chunk smaller than the block", edit(kvaware(good, "--block-size", "32"), func(e *v1alpha1.InferenceEndpointConfig) {
			e.Spec.KVCacheSpec.ChunkSize = ptr.To[int32](16)
		}), metav1.ConditionFalse, ReasonChunkSizeMismatch, "chunk size 16"},
		{"user's hash algorithm is followed by LMCache", kvaware(good, "--prefix-caching-hash-algo", "xxhash_cbor"), metav1.ConditionTrue, ReasonEventsLineUp, "hash xxhash_cbor"},
		{"vLLM events turned off", kvaware(good, "--kv-events-config", `{"enable_kv_cache_events":false}`),
			metav1.ConditionTrue, ReasonEventsLineUp, ""}, // the operator's flag follows the user's and wins
		{"LMCache off: GPU events only", edit(kvaware("lmcache/vllm-openai:v0.3.9"), func(e *v1alpha1.InferenceEndpointConfig) {
			e.Spec.KVCacheSpec.EnableL1Cache = ptr.To(false)
		}), metav1.ConditionTrue, ReasonGPUEventsOnly, "block size 16"},
		{"cacheConfigFile without events", edit(kvaware(good), func(e *v1alpha1.InferenceEndpointConfig) {
			e.Spec.KVCacheSpec.CacheConfigFile = "chunk_size: 256\nlocal_cpu: true\n"
		}), metav1.ConditionFalse, ReasonKVEventsDisabled, "set enable_kv_events: true"},
		{"cacheConfigFile with the default hash", edit(kvaware(good), func(e *v1alpha1.InferenceEndpointConfig) {
			e.Spec.KVCacheSpec.CacheConfigFile = "chunk_size: 256\nenable_kv_events: true\n"
		}), metav1.ConditionFalse, ReasonHashAlgorithmMismatch, `LMCache hashes chunks with "builtin" and vLLM hashes blocks with "sha256_cbor"`},
		{"cacheConfigFile that lines up (old hash name)", edit(kvaware(good), func(e *v1alpha1.InferenceEndpointConfig) {
			e.Spec.KVCacheSpec.CacheConfigFile = "chunk_size: 512\nenable_kv_events: true\npre_caching_hash_algorithm: sha256_cbor_64bit\n"
		}), metav1.ConditionTrue, ReasonEventsLineUp, "chunk 512 = 32 vLLM blocks"},
		{"cacheConfigFile not YAML", edit(kvaware(good), func(e *v1alpha1.InferenceEndpointConfig) {
			e.Spec.KVCacheSpec.CacheConfigFile = "chunk_size: [256"
		}), metav1.ConditionFalse, ReasonCacheConfigUnreadable, "not a YAML mapping"},
		{"several problems are all named", kvaware("lmcache/vllm-openai:v0.3.9", "--block-size", "24"),
			metav1.ConditionFalse, ReasonChunkSizeMismatch, "older than 0.4.3"},
		{"simulated", edit(kvaware("lmcache/vllm-openai:v0.3.9"), func(e *v1alpha1.InferenceEndpointConfig) { e.Spec.Simulate = true }),
			metav1.ConditionTrue, ReasonSimulated, "vllm-sim"},
		{"prefixaware has no condition", edit(kvaware("lmcache/vllm-openai:v0.3.9"), func(e *v1alpha1.InferenceEndpointConfig) {
			e.Spec.IntelligentRoutingSpec.RoutingStrategy = v1alpha1.StrategyPrefixAware
		}), "", "", ""},
		{"routing off has no condition", edit(kvaware(good), func(e *v1alpha1.InferenceEndpointConfig) {
			e.Spec.IntelligentRoutingSpec.Enabled = ptr.To(false)
		}), "", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.iec.Generation = 3
			c, ok := kvEventsCondition(tt.iec, Options{SimulatorImage: "sim"})
			if tt.status == "" {
				if ok {
					t.Fatalf("condition %+v, want none", c)
				}
				return
			}
			if !ok || c.Type != v1alpha1.ConditionKVEventsUsable || c.Status != tt.status || c.Reason != tt.reason || c.ObservedGeneration != 3 {
				t.Fatalf("condition %+v (set %v), want %s/%s", c, ok, tt.status, tt.reason)
			}
			if !strings.Contains(c.Message, tt.msg) {
				t.Errorf("message %q does not contain %q", c.Message, tt.msg)
			}
		})
	}
}

// TestJudgeWorkerEvents covers what the operator's own flags keep from
// happening to a planned worker (its --enable-prefix-caching and
// --kv-events-config follow the user's and win), for a container whose
// settings come from elsewhere.
func TestJudgeWorkerEvents(t *testing.T) {
	base := workerEvents{
		image: "lmcache/vllm-openai:v0.5.5", vllmEvents: true, prefixCaching: true, blockSize: 16, vllmHash: "sha256_cbor",
		lmcache: true, lmcacheEvents: true, chunkSize: 256, lmcacheHash: "sha256_cbor",
	}
	tests := []struct {
		name   string
		edit   func(*workerEvents)
		status metav1.ConditionStatus
		reason string
	}{
		{"lined up", func(*workerEvents) {}, metav1.ConditionTrue, ReasonEventsLineUp},
		{"vLLM events off", func(w *workerEvents) { w.vllmEvents = false }, metav1.ConditionFalse, ReasonKVEventsDisabled},
		{"prefix caching off", func(w *workerEvents) { w.prefixCaching = false }, metav1.ConditionFalse, ReasonPrefixCachingDisabled},
		{"LMCache events off", func(w *workerEvents) { w.lmcacheEvents = false }, metav1.ConditionFalse, ReasonKVEventsDisabled},
		{"LMCache with vLLM's default hash", func(w *workerEvents) { w.vllmHash = "sha256" }, metav1.ConditionFalse, ReasonHashAlgorithmMismatch},
		{"block size unreadable", func(w *workerEvents) { w.blockSize = 0 }, metav1.ConditionFalse, ReasonChunkSizeMismatch},
		{"LMCache off, old image", func(w *workerEvents) { w.lmcache, w.image = false, "lmcache/vllm-openai:v0.3.9" }, metav1.ConditionTrue, ReasonGPUEventsOnly},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := base
			tt.edit(&w)
			var c metav1.Condition
			judgeWorkerEvents(&c, w)
			if c.Status != tt.status || c.Reason != tt.reason || c.Message == "" {
				t.Errorf("got %s/%s %q, want %s/%s", c.Status, c.Reason, c.Message, tt.status, tt.reason)
			}
		})
	}
}

// TestPlanWorkerLinesUpEvents: a routed, caching worker gets the settings
// the check requires, and nothing changes for an endpoint without routing.
func TestPlanWorkerLinesUpEvents(t *testing.T) {
	env := func(p workerPlan) map[string]string {
		m := map[string]string{}
		for _, e := range p.Env {
			m[e.Name] = e.Value
		}
		return m
	}
	p := planWorker(kvaware("lmcache/vllm-openai:v0.5.5"), Options{})
	if v, _ := lastFlagValue(p.Args, hashAlgoFlag); v != "sha256_cbor" {
		t.Errorf("args %q: want %s sha256_cbor", p.Args, hashAlgoFlag)
	}
	e := env(p)
	if e["LMCACHE_ENABLE_KV_EVENTS"] != "true" || e["LMCACHE_PRE_CACHING_HASH_ALGORITHM"] != "sha256_cbor" || e["LMCACHE_CHUNK_SIZE"] != "256" {
		t.Errorf("env %v: want LMCache events on, hash sha256_cbor, chunk 256", e)
	}

	user := kvaware("lmcache/vllm-openai:v0.5.5", "--prefix-caching-hash-algo=sha256")
	user.Spec.Worker.EnvironmentVariables = []corev1.EnvVar{{Name: "LMCACHE_ENABLE_KV_EVENTS", Value: "false"}}
	p = planWorker(user, Options{})
	if n := slices.IndexFunc(p.Args, func(a string) bool { return strings.HasPrefix(a, hashAlgoFlag) }); n < 0 || slices.ContainsFunc(p.Args[n+1:], func(a string) bool { return strings.HasPrefix(a, hashAlgoFlag) }) {
		t.Errorf("args %q: want the user's %s alone", p.Args, hashAlgoFlag)
	}
	if e := env(p); e["LMCACHE_PRE_CACHING_HASH_ALGORITHM"] != "sha256" || e["LMCACHE_ENABLE_KV_EVENTS"] != "true" {
		t.Errorf("env %v: want LMCache to follow the user's sha256, with events on", e)
	}

	plain := kvaware("lmcache/vllm-openai:v0.5.5")
	plain.Spec.IntelligentRoutingSpec.Enabled = ptr.To(false)
	p = planWorker(plain, Options{})
	if hasFlag(p.Args, hashAlgoFlag) || env(p)["LMCACHE_ENABLE_KV_EVENTS"] != "" || env(p)["LMCACHE_PRE_CACHING_HASH_ALGORITHM"] != "" {
		t.Errorf("unrouted worker got event settings: args %q env %v", p.Args, env(p))
	}
}
