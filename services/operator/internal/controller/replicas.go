package controller

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/warmpath/warmpath/libs/fleetlimit"
	v1alpha1 "github.com/warmpath/warmpath/services/operator/api/v1alpha1"
)

// routerKVIndexEnv sets the router's --kv-index-redis (libs/flagenv).
// An environment variable rather than a flag: its value may refer to the
// password variable, which the kubelet expands, so the password is in
// neither the pod spec nor the router's command line.
const routerKVIndexEnv = "WARMPATH_ROUTER_KV_INDEX_REDIS"

// Reasons of RequestLimitsHeld and KVIndexShared.
const (
	ReasonLimitsDivided         = "LimitsDivided"
	ReasonFewerSlotsThanRouters = "FewerSlotsThanRouters"
	ReasonIndexInRedis          = "SharedInRedis"
	ReasonIndexPerReplica       = "PerReplica"
)

// kvIndexRedis is the Redis the routers keep kvaware's index in, as the
// router's --kv-index-redis reads it: the L2's, when the L2 is a Redis the
// router's client speaks (valkey:// is a Redis to it); "" when there is
// none — the tiered-storage cache server (lm://, or resp://, which has no
// scripts) and redis-sentinel://, which the router's client does not
// follow.
func kvIndexRedis(iec *v1alpha1.InferenceEndpointConfig) string {
	if l2Backend(iec) == "" {
		return ""
	}
	scheme, rest, ok := strings.Cut(iec.Spec.KVCacheSpec.L2CacheSpec.L2CacheLocalUrl, "://")
	switch {
	case !ok:
		return ""
	case scheme == "redis", scheme == "rediss", scheme == "redis-cluster":
		return scheme + "://" + rest
	case scheme == "valkey":
		return "redis://" + rest
	}
	return ""
}

// routerEnv is the router container's environment: its pod IP, and the
// shared kvaware index whenever the L2 can hold it. It does not depend on the strategy
// or on routerReplicas, which both change without restarting the
// routers: the index is fed from the workers' KV events under every
// strategy, so a switch to kvaware finds it warm, and even one router
// gains from it, as the pod that replaces it in a rolling update starts
// from the index the old one wrote.
func routerEnv(iec *v1alpha1.InferenceEndpointConfig) []corev1.EnvVar {
	// The router's own address, by which it is known to its peers
	// (--peer-self, routerArgs).
	env := []corev1.EnvVar{{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{
		FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "status.podIP"},
	}}}
	url := kvIndexRedis(iec)
	if url == "" || !routingEnabled(iec) {
		return env
	}
	if ref := iec.Spec.KVCacheSpec.L2CacheSpec.PasswordSecretRef; ref != nil {
		// Declared before the URL: $(VAR) expands only variables
		// defined earlier in the list.
		env = append(env, corev1.EnvVar{Name: l2PasswordEnv, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: ref.DeepCopy()}})
		url = urlWithPassword(url)
	}
	return append(env, corev1.EnvVar{Name: routerKVIndexEnv, Value: url})
}

// routerReplicas is the number of routers, when more than one shares the
// endpoint's traffic; 0 otherwise (routing off, or one router).
func routerReplicas(iec *v1alpha1.InferenceEndpointConfig) int32 {
	n := int32Or(iec.Spec.IntelligentRoutingSpec.RouterReplicas, 1)
	if !routingEnabled(iec) || n <= 1 {
		return 0
	}
	return n
}

// requestLimitsCondition says how the routers divide requestLimits: True
// when together they admit at most the limits, False when a limit is
// smaller than the number of routers, each of which still takes 1 (0
// would be unlimited). Absent with one router or no limit.
func requestLimitsCondition(iec *v1alpha1.InferenceEndpointConfig) (metav1.Condition, bool) {
	c := metav1.Condition{Type: v1alpha1.ConditionRequestLimitsHeld, ObservedGeneration: iec.Generation}
	n, l := routerReplicas(iec), iec.Spec.Worker.RequestLimits
	if n == 0 || l == nil || (l.MaxConcurrentRequests <= 0 && l.MaxQueueSize <= 0) {
		return c, false
	}
	conc, queue := share("maxConcurrentRequests", l.MaxConcurrentRequests, n), share("maxQueueSize", l.MaxQueueSize, n)
	if fleetlimit.Overcommitted(l.MaxConcurrentRequests, n) || fleetlimit.Overcommitted(l.MaxQueueSize, n) {
		c.Status, c.Reason = metav1.ConditionFalse, ReasonFewerSlotsThanRouters
		c.Message = fmt.Sprintf("each of the %d routers takes at least 1 (0 would be unlimited), so the endpoint admits more than its limit: %s, %s; "+
			"raise worker.requestLimits to at least intelligentRoutingSpec.routerReplicas or lower routerReplicas", n, conc, queue)
		return c, true
	}
	c.Status, c.Reason = metav1.ConditionTrue, ReasonLimitsDivided
	c.Message = fmt.Sprintf("each of the %d routers holds its share, rounded down, so together they admit at most the limit: %s, %s", n, conc, queue)
	return c, true
}

// share describes one limit's division among n routers.
func share(name string, limit, n int32) string {
	if limit <= 0 {
		return name + " unset"
	}
	return fmt.Sprintf("%s %d is %d per router, %d in all", name, limit, fleetlimit.PerReplica(limit, n), fleetlimit.Fleet(limit, n))
}

// kvIndexCondition says whether kvaware's routers share one index (in the
// L2's Redis) or each keep their own. Absent with one router or another
// strategy.
func kvIndexCondition(iec *v1alpha1.InferenceEndpointConfig) (metav1.Condition, bool) {
	c := metav1.Condition{Type: v1alpha1.ConditionKVIndexShared, ObservedGeneration: iec.Generation}
	n := routerReplicas(iec)
	if n == 0 || iec.Spec.IntelligentRoutingSpec.RoutingStrategy != v1alpha1.StrategyKVAware {
		return c, false
	}
	if url := kvIndexRedis(iec); url != "" {
		c.Status, c.Reason = metav1.ConditionTrue, ReasonIndexInRedis
		c.Message = fmt.Sprintf("the %d routers keep kvaware's index in the L2's Redis (%s); each falls back to its own while that Redis fails", n, redactPassword(url))
		return c, true
	}
	c.Status, c.Reason = metav1.ConditionFalse, ReasonIndexPerReplica
	c.Message = fmt.Sprintf("no Redis to share (an L2 of l2CacheBackend redis at redis://, rediss://, redis-cluster:// or valkey://): "+
		"each of the %d routers keeps its own kvaware index from the workers' KV events, and one that starts or misses events learns alone", n)
	return c, true
}

// redactPassword drops any user info from url before it reaches the
// status (the CRD forbids a password in it, but say nothing of it).
func redactPassword(url string) string {
	scheme, rest, ok := strings.Cut(url, "://")
	if at := strings.LastIndexByte(rest, '@'); ok && at >= 0 {
		return scheme + "://" + rest[at+1:]
	}
	return url
}

// setReplicaConditions sets RequestLimitsHeld and KVIndexShared (with a
// Warning event when the limits turn overcommitted) or removes them.
func (r *Reconciler) setReplicaConditions(iec *v1alpha1.InferenceEndpointConfig) {
	if c, ok := requestLimitsCondition(iec); ok {
		if c.Status == metav1.ConditionFalse && !meta.IsStatusConditionFalse(iec.Status.Conditions, c.Type) {
			r.Recorder.Eventf(iec, nil, corev1.EventTypeWarning, ReasonFewerSlotsThanRouters, "DivideLimits", "%s", c.Message)
		}
		meta.SetStatusCondition(&iec.Status.Conditions, c)
	} else {
		meta.RemoveStatusCondition(&iec.Status.Conditions, v1alpha1.ConditionRequestLimitsHeld)
	}
	if c, ok := kvIndexCondition(iec); ok {
		meta.SetStatusCondition(&iec.Status.Conditions, c)
	} else {
		meta.RemoveStatusCondition(&iec.Status.Conditions, v1alpha1.ConditionKVIndexShared)
	}
}
