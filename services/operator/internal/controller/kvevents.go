package controller

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	v1alpha1 "github.com/warmpath/warmpath/services/operator/api/v1alpha1"
)

// vLLM flags and defaults the KV-event check reads. The defaults are
// vLLM's CacheConfig (vllm/config/cache.py): DEFAULT_BLOCK_SIZE 16,
// enable_prefix_caching True, prefix_caching_hash_algo "sha256".
const (
	hashAlgoFlag         = "--prefix-caching-hash-algo"
	blockSizeFlag        = "--block-size"
	kvEventsFlag         = "--kv-events-config"
	vllmDefaultBlockSize = 16
	vllmDefaultHashAlgo  = "sha256"
)

// LMCache defaults (lmcache/v1/config.py _CONFIG_DEFINITIONS): what a
// cacheConfigFile that leaves a key out gets.
const (
	lmcacheDefaultChunkSize = 256
	lmcacheDefaultHashAlgo  = "builtin"
)

// lmcacheImageRepo is the image whose tags name LMCache releases
// (vX.Y.Z, vX.Y.Z-cu129, vX.Y.Z-lightweight: LMCache's
// .github/workflows/publish.yml). Tags of other images say nothing about
// the LMCache inside.
const lmcacheImageRepo = "lmcache/vllm-openai"

// The oldest LMCache release kvaware accepts: the managed offering's
// support matrix pairs LMCache 0.4.3 with vLLM 0.19.1 for kvaware, and
// the chart's earlier default, v0.3.9, predates LMCache's KV events
// (LMCache PR #1959).
const (
	minLMCacheMajor = 0
	minLMCacheMinor = 4
	minLMCachePatch = 3
)

// Reasons of the KVEventsUsable condition.
const (
	// ReasonEventsLineUp: vLLM and LMCache publish events kvaware can
	// index together.
	ReasonEventsLineUp = "EventsLineUp"
	// ReasonGPUEventsOnly: LMCache is off; vLLM's GPU events are all there
	// is, and all kvaware needs.
	ReasonGPUEventsOnly = "GPUEventsOnly"
	// ReasonSimulated: vllm-sim runs in place of the image and publishes
	// the events the operator configures.
	ReasonSimulated = "Simulated"
	// ReasonUnknownWorkerImage (Unknown): the image's tag does not tell the
	// LMCache release; the settings line up, the release may not.
	ReasonUnknownWorkerImage = "UnknownWorkerImage"

	// The refusals (False): the workers cannot publish usable events.
	ReasonLMCacheTooOld         = "LMCacheTooOld"
	ReasonChunkSizeMismatch     = "ChunkSizeNotBlockMultiple"
	ReasonKVEventsDisabled      = "KVEventsDisabled"
	ReasonPrefixCachingDisabled = "PrefixCachingDisabled"
	ReasonHashAlgorithmMismatch = "HashAlgorithmMismatch"
	ReasonCacheConfigUnreadable = "CacheConfigFileUnreadable"
)

// A refusal shows as Ready's reason and a Warning event's, with this
// message around the condition's.
const (
	reasonReadyKVEventsUnusable  = "KVEventsUnusable"
	kvEventsUnusableEventAction  = "CheckKVEvents"
	kvEventsUnusableEventMessage = "kvaware cannot use the workers' KV events: %s"
)

// workerEvents is what the worker container will run with, as far as KV
// events are concerned: read from the final args and env (the user's and
// the operator's together), so the check sees what vLLM and LMCache see.
type workerEvents struct {
	image         string
	vllmEvents    bool // --kv-events-config with enable_kv_cache_events
	prefixCaching bool
	blockSize     int
	vllmHash      string

	lmcache       bool // the LMCache connector is configured
	lmcacheEvents bool
	chunkSize     int
	lmcacheHash   string
	configErr     error // kvCacheSpec.cacheConfigFile is not a YAML mapping
}

// readWorkerEvents derives the facts from the planned container.
func readWorkerEvents(iec *v1alpha1.InferenceEndpointConfig, p workerPlan) workerEvents {
	w := workerEvents{
		image:         p.Image,
		prefixCaching: true,
		blockSize:     vllmDefaultBlockSize,
		vllmHash:      vllmDefaultHashAlgo,
		lmcache:       cachingEnabled(iec),
		chunkSize:     lmcacheDefaultChunkSize,
		lmcacheHash:   lmcacheDefaultHashAlgo,
	}
	for _, a := range p.Args {
		// argparse's BooleanOptionalAction: the last of the pair wins.
		switch a {
		case "--enable-prefix-caching":
			w.prefixCaching = true
		case "--no-enable-prefix-caching":
			w.prefixCaching = false
		}
	}
	if v, ok := lastFlagValue(p.Args, blockSizeFlag); ok {
		w.blockSize, _ = strconv.Atoi(v) // unparseable: 0, which vLLM refuses too
	}
	if v, ok := lastFlagValue(p.Args, hashAlgoFlag); ok {
		w.vllmHash = v
	}
	if v, ok := lastFlagValue(p.Args, kvEventsFlag); ok {
		var cfg struct {
			Enable bool `json:"enable_kv_cache_events"`
		}
		w.vllmEvents = json.Unmarshal([]byte(v), &cfg) == nil && cfg.Enable
	}
	if !w.lmcache {
		return w
	}
	if file := iec.Spec.KVCacheSpec.CacheConfigFile; file != "" {
		// The file replaces every LMCache setting the operator derives.
		w.configErr = w.readLMCacheFile(file)
		return w
	}
	for _, e := range p.Env {
		switch e.Name {
		case "LMCACHE_CHUNK_SIZE":
			w.chunkSize, _ = strconv.Atoi(e.Value)
		case "LMCACHE_ENABLE_KV_EVENTS":
			w.lmcacheEvents, _ = strconv.ParseBool(e.Value)
		case "LMCACHE_PRE_CACHING_HASH_ALGORITHM":
			w.lmcacheHash = e.Value
		}
	}
	return w
}

// readLMCacheFile reads the three settings from an LMCache YAML file.
func (w *workerEvents) readLMCacheFile(file string) error {
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(file), &cfg); err != nil {
		return fmt.Errorf("kvCacheSpec.cacheConfigFile is not a YAML mapping: %w", err)
	}
	if v, ok := cfg["chunk_size"]; ok {
		n, ok := v.(float64)
		if !ok || n != float64(int(n)) {
			return fmt.Errorf("kvCacheSpec.cacheConfigFile: chunk_size %v is not a whole number", v)
		}
		w.chunkSize = int(n)
	}
	switch v := cfg["enable_kv_events"].(type) {
	case bool:
		w.lmcacheEvents = v
	case string:
		w.lmcacheEvents, _ = strconv.ParseBool(v)
	}
	if v, ok := cfg["pre_caching_hash_algorithm"].(string); ok {
		w.lmcacheHash = v
	}
	return nil
}

// lastFlagValue is the value of the last "--flag value" or "--flag=value"
// in args: argparse keeps the last.
func lastFlagValue(args []string, flag string) (string, bool) {
	var v string
	var found bool
	for i, a := range args {
		switch {
		case a == flag && i+1 < len(args):
			v, found = args[i+1], true
		case strings.HasPrefix(a, flag+"="):
			v, found = strings.TrimPrefix(a, flag+"="), true
		}
	}
	return v, found
}

// vllmHashAlgo is the algorithm vLLM hashes blocks with on a routed,
// caching endpoint: the user's --prefix-caching-hash-algo, else the one the
// operator appends. LMCache is configured with the same.
func vllmHashAlgo(iec *v1alpha1.InferenceEndpointConfig) string {
	if !simulated(iec) {
		if v, ok := lastFlagValue(iec.Spec.Worker.Args, hashAlgoFlag); ok {
			return v
		}
	}
	return eventHashAlgo
}

// canonicalHash folds the name vLLM used before its PR #23673 into the
// current one, as LMCache's token_database.py does.
func canonicalHash(algo string) string {
	if algo == "sha256_cbor_64bit" {
		return "sha256_cbor"
	}
	return algo
}

// lmcacheRelease reads the LMCache release from an lmcache/vllm-openai
// image reference (optionally on docker.io, optionally pinned by digest as
// well). ok is false when the image is another one or its tag is not
// vX.Y.Z[suffix] (latest, lightweight, a digest alone).
func lmcacheRelease(image string) (ver [3]int, ok bool) {
	ref, _, _ := strings.Cut(image, "@")
	slash := strings.LastIndex(ref, "/")
	colon := strings.LastIndex(ref, ":")
	if colon < 0 || colon < slash {
		return ver, false
	}
	repo, tag := ref[:colon], ref[colon+1:]
	for _, p := range []string{"docker.io/", "index.docker.io/", "registry-1.docker.io/"} {
		repo = strings.TrimPrefix(repo, p)
	}
	if repo != lmcacheImageRepo {
		return ver, false
	}
	rest, found := strings.CutPrefix(tag, "v")
	if !found {
		return ver, false
	}
	for i := range ver {
		end := 0
		for end < len(rest) && rest[end] >= '0' && rest[end] <= '9' {
			end++
		}
		n, err := strconv.Atoi(rest[:end])
		if err != nil {
			return ver, false
		}
		ver[i], rest = n, rest[end:]
		if i < 2 {
			if rest, found = strings.CutPrefix(rest, "."); !found {
				return ver, false
			}
		}
	}
	return ver, true
}

func versionLess(a [3]int, major, minor, patch int) bool {
	b := [3]int{major, minor, patch}
	for i := range a {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return false
}

// kvEventsCondition is KVEventsUsable for an endpoint routed by kvaware;
// ok is false for any other endpoint, which has no such condition.
//
// False is a refusal: the workers, as configured, publish no events the
// router can index (or events that cannot line up), so kvaware would route
// blind. Unknown: the settings line up but the image's LMCache release
// cannot be read from its tag. The check reads the container the operator
// plans, so it judges exactly what the workers will run.
func kvEventsCondition(iec *v1alpha1.InferenceEndpointConfig, o Options) (metav1.Condition, bool) {
	c := metav1.Condition{Type: v1alpha1.ConditionKVEventsUsable, ObservedGeneration: iec.Generation}
	if !routingEnabled(iec) || iec.Spec.IntelligentRoutingSpec.RoutingStrategy != v1alpha1.StrategyKVAware {
		return c, false
	}
	if simulated(iec) {
		c.Status, c.Reason = metav1.ConditionTrue, ReasonSimulated
		c.Message = "vllm-sim runs in place of the worker image and publishes the GPU (and, with LMCache on, CPU) events the operator configures"
		return c, true
	}
	judgeWorkerEvents(&c, readWorkerEvents(iec, planWorker(iec, o)))
	return c, true
}

// judgeWorkerEvents sets c's status, reason and message from w.
func judgeWorkerEvents(c *metav1.Condition, w workerEvents) {
	type problem struct{ reason, msg string }
	var problems []problem
	add := func(reason, format string, args ...any) {
		problems = append(problems, problem{reason, fmt.Sprintf(format, args...)})
	}
	if !w.vllmEvents {
		add(ReasonKVEventsDisabled, "vLLM publishes no KV events (%s has enable_kv_cache_events off in worker.args)", kvEventsFlag)
	}
	if !w.prefixCaching {
		add(ReasonPrefixCachingDisabled, "vLLM's prefix caching is off (--no-enable-prefix-caching), so there are no cached blocks to publish")
	}
	if w.blockSize <= 0 {
		add(ReasonChunkSizeMismatch, "%s is not a positive number of tokens", blockSizeFlag)
	}
	ver, known := lmcacheRelease(w.image)
	if w.lmcache {
		switch {
		case w.configErr != nil:
			add(ReasonCacheConfigUnreadable, "%v", w.configErr)
		default:
			if !w.lmcacheEvents {
				// Only a cacheConfigFile can leave it off: the operator
				// sets LMCACHE_ENABLE_KV_EVENTS on every routed worker.
				add(ReasonKVEventsDisabled, "LMCache's enable_kv_events is off in kvCacheSpec.cacheConfigFile, so its CPU tier publishes nothing; set enable_kv_events: true")
			}
			if w.blockSize > 0 && (w.chunkSize <= 0 || w.chunkSize%w.blockSize != 0) {
				add(ReasonChunkSizeMismatch, "LMCache's chunk size %d is not a multiple of vLLM's block size %d, so its events cannot be keyed as vLLM's blocks", w.chunkSize, w.blockSize)
			}
			if canonicalHash(w.lmcacheHash) != canonicalHash(w.vllmHash) {
				add(ReasonHashAlgorithmMismatch, "LMCache hashes chunks with %q and vLLM hashes blocks with %q; set pre_caching_hash_algorithm and %s alike (%s)",
					w.lmcacheHash, w.vllmHash, hashAlgoFlag, eventHashAlgo)
			}
		}
		if known && versionLess(ver, minLMCacheMajor, minLMCacheMinor, minLMCachePatch) {
			add(ReasonLMCacheTooOld, "image %s carries LMCache %d.%d.%d, older than %d.%d.%d, the first kvaware pairs with (and vLLM >= 0.19.1); use a newer lmcache/vllm-openai tag",
				w.image, ver[0], ver[1], ver[2], minLMCacheMajor, minLMCacheMinor, minLMCachePatch)
		}
	}
	switch {
	case len(problems) > 0:
		msgs := make([]string, len(problems))
		for i, p := range problems {
			msgs[i] = p.msg
		}
		c.Status, c.Reason = metav1.ConditionFalse, problems[0].reason
		c.Message = strings.Join(msgs, "; ")
	case !w.lmcache:
		c.Status, c.Reason = metav1.ConditionTrue, ReasonGPUEventsOnly
		c.Message = fmt.Sprintf("LMCache is off: vLLM publishes its GPU blocks (stored, removed, cleared) at block size %d", w.blockSize)
	case !known:
		c.Status, c.Reason = metav1.ConditionUnknown, ReasonUnknownWorkerImage
		c.Message = fmt.Sprintf("the settings line up (LMCache chunk %d over vLLM block %d, hash %s on both), but the LMCache release in image %s "+
			"cannot be read from its tag: kvaware needs LMCache >= %d.%d.%d with vLLM >= 0.19.1 (an lmcache/vllm-openai:vX.Y.Z tag is checked)",
			w.chunkSize, w.blockSize, w.vllmHash, w.image, minLMCacheMajor, minLMCacheMinor, minLMCachePatch)
	default:
		c.Status, c.Reason = metav1.ConditionTrue, ReasonEventsLineUp
		c.Message = fmt.Sprintf("vLLM publishes its GPU blocks and LMCache %d.%d.%d its CPU stores (store-only: evictions from LMCache are not published) "+
			"at chunk %d = %d vLLM blocks of %d, hash %s on both", ver[0], ver[1], ver[2], w.chunkSize, w.chunkSize/w.blockSize, w.blockSize, w.vllmHash)
	}
}
