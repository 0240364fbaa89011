package controller

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/warmpath/warmpath/services/operator/api/v1alpha1"
)

// TestRouterKVIndexFromL2: a Redis-compatible L2 also holds the routers'
// kvaware index (--kv-index-redis, set through its environment variable),
// so every router replica routes on one index; the password, if any,
// reaches the router the way it reaches the workers, as a reference to a
// variable from the Secret. Stores the router's client does not speak
// leave the index in each router's memory.
func TestRouterKVIndexFromL2(t *testing.T) {
	secret := &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "redis"}, Key: "password"}
	tests := []struct {
		name    string
		backend v1alpha1.L2Backend
		url     string
		pass    *corev1.SecretKeySelector
		want    string // "": no shared index
	}{
		{"redis", "redis", "redis://redis.db.svc:6379", nil, "redis://redis.db.svc:6379"},
		{"redis with a database", "Redis", "redis://redis.db.svc:6379/2", nil, "redis://redis.db.svc:6379/2"},
		{"TLS", "redis", "rediss://redis.db.svc:6380", nil, "rediss://redis.db.svc:6380"},
		{"cluster", "redis", "redis-cluster://a.db.svc:6379,b.db.svc:6379", nil, "redis-cluster://a.db.svc:6379,b.db.svc:6379"},
		{"valkey speaks Redis", "redis", "valkey://valkey.db.svc:6379", nil, "redis://valkey.db.svc:6379"},
		{"password from the Secret", "redis", "redis://redis.db.svc:6379", secret, "redis://:$(WARMPATH_L2_PASSWORD)@redis.db.svc:6379"},
		{"sentinel: not the router's client", "redis", "redis-sentinel://s.db.svc:26379", nil, ""},
		{"the cache server's RESP", "redis", "resp://cache.db.svc:6379", nil, ""},
		{"tiered storage", "tieredstorage", "", nil, ""},
		{"tiered storage at lm://", "tieredstorage", "lm://cache.db.svc:65432", nil, ""},
		{"no L2", "", "", nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			iec := &v1alpha1.InferenceEndpointConfig{}
			iec.Spec.IntelligentRoutingSpec.Enabled = ptr.To(true)
			if tt.backend != "" {
				iec.Spec.KVCacheSpec.EnableL2Cache = ptr.To(true)
				iec.Spec.KVCacheSpec.L2CacheSpec = &v1alpha1.L2CacheSpec{L2CacheBackend: tt.backend, L2CacheLocalUrl: tt.url, PasswordSecretRef: tt.pass}
			}
			env := routerDeployment(iec, Options{}).Spec.Template.Spec.Containers[0].Env
			i := slices.IndexFunc(env, func(e corev1.EnvVar) bool { return e.Name == routerKVIndexEnv })
			if tt.want == "" {
				if i >= 0 {
					t.Fatalf("router env %+v, want no %s", env, routerKVIndexEnv)
				}
				return
			}
			if i < 0 || env[i].Value != tt.want {
				t.Fatalf("router env %+v, want %s=%s", env, routerKVIndexEnv, tt.want)
			}
			p := slices.IndexFunc(env, func(e corev1.EnvVar) bool { return e.Name == l2PasswordEnv })
			if (tt.pass != nil) != (p >= 0 && p < i) {
				t.Fatalf("router env %+v: the password variable must come from the Secret, before the URL, exactly when there is one", env)
			}
			if p >= 0 && (env[p].ValueFrom == nil || env[p].ValueFrom.SecretKeyRef == nil || *env[p].ValueFrom.SecretKeyRef != *tt.pass) {
				t.Fatalf("password variable %+v, want it from %+v", env[p], tt.pass)
			}
		})
	}
}

// TestReplicaConditions: with more than one router, the status says what
// the routers divide (requestLimits: RequestLimitsHeld, False when each
// router's minimum of 1 adds up to more than the limit) and, for kvaware,
// whether they share its index (KVIndexShared). One router has neither.
func TestReplicaConditions(t *testing.T) {
	redis := &v1alpha1.L2CacheSpec{L2CacheBackend: "redis", L2CacheLocalUrl: "redis://redis.db.svc:6379"}
	tests := []struct {
		name         string
		replicas     int32
		strategy     v1alpha1.RoutingStrategy
		limits       *v1alpha1.RequestLimits
		l2           *v1alpha1.L2CacheSpec
		limitsHeld   metav1.ConditionStatus // "": absent
		limitsReason string
		indexShared  metav1.ConditionStatus
		indexReason  string
	}{
		{"one router: nothing divided or shared", 1, v1alpha1.StrategyKVAware, &v1alpha1.RequestLimits{MaxConcurrentRequests: 2}, nil, "", "", "", ""},
		{"7 over 3: 2 each", 3, v1alpha1.StrategyPrefixAware, &v1alpha1.RequestLimits{MaxConcurrentRequests: 7, MaxQueueSize: 6}, nil, metav1.ConditionTrue, ReasonLimitsDivided, "", ""},
		{"2 over 3: 1 each admits 3", 3, v1alpha1.StrategyPrefixAware, &v1alpha1.RequestLimits{MaxConcurrentRequests: 2}, nil, metav1.ConditionFalse, ReasonFewerSlotsThanRouters, "", ""},
		{"a queue of 2 over 3: 1 each queues 3", 3, v1alpha1.StrategyPrefixAware, &v1alpha1.RequestLimits{MaxConcurrentRequests: 30, MaxQueueSize: 2}, nil, metav1.ConditionFalse, ReasonFewerSlotsThanRouters, "", ""},
		{"unlimited: nothing divided", 3, v1alpha1.StrategyPrefixAware, nil, nil, "", "", "", ""},
		{"kvaware without Redis: per replica", 2, v1alpha1.StrategyKVAware, nil, nil, "", "", metav1.ConditionFalse, ReasonIndexPerReplica},
		{"kvaware with a Redis L2: shared", 2, v1alpha1.StrategyKVAware, nil, redis, "", "", metav1.ConditionTrue, ReasonIndexInRedis},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			iec := &v1alpha1.InferenceEndpointConfig{}
			iec.Spec.IntelligentRoutingSpec = v1alpha1.IntelligentRoutingSpec{Enabled: ptr.To(true), RouterReplicas: ptr.To(tt.replicas), RoutingStrategy: tt.strategy}
			iec.Spec.Worker.RequestLimits = tt.limits
			if tt.l2 != nil {
				iec.Spec.KVCacheSpec.EnableL2Cache, iec.Spec.KVCacheSpec.L2CacheSpec = ptr.To(true), tt.l2
			}
			check := func(c metav1.Condition, ok bool, status metav1.ConditionStatus, reason string) {
				t.Helper()
				if ok != (status != "") || (ok && (c.Status != status || c.Reason != reason || c.Message == "")) {
					t.Errorf("%s %+v (present %v), want %q/%s", c.Type, c, ok, status, reason)
				}
			}
			c, ok := requestLimitsCondition(iec)
			check(c, ok, tt.limitsHeld, tt.limitsReason)
			c, ok = kvIndexCondition(iec)
			check(c, ok, tt.indexShared, tt.indexReason)
		})
	}
}
