package chart

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"
)

// object is the part of a rendered manifest the security tests read.
type object struct {
	Kind     string         `json:"kind"`
	Metadata objectMetadata `json:"metadata"`
	Raw      map[string]any `json:"-"`
}

type objectMetadata struct {
	Name      string            `json:"name"`
	Namespace string            `json:"namespace"`
	Labels    map[string]string `json:"labels"`
}

// objects splits a rendered stream into documents, keeping each one both
// as object and as a generic map for the field a test digs out.
func objects(t *testing.T, stream string) []object {
	t.Helper()
	var out []object
	for _, doc := range strings.Split(stream, "\n---") {
		doc = strings.TrimPrefix(doc, "---")
		if strings.TrimSpace(stripComments(doc)) == "" {
			continue
		}
		var o object
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatalf("document is not YAML: %v\n%s", err, doc)
		}
		if err := yaml.Unmarshal([]byte(doc), &o.Raw); err != nil {
			t.Fatal(err)
		}
		out = append(out, o)
	}
	return out
}

func renderProfile(t *testing.T, file string) []object {
	t.Helper()
	out, err := render(t, loadValues(t, file))
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	return objects(t, out)
}

// TestOperatorRBACLeastPrivilege: the operator's ClusterRole holds no verb
// that lets it grant more than it holds itself. It creates the router's
// Role, which Kubernetes allows without escalate because the operator holds
// every permission that Role grants (endpointslices get/list/watch); and
// binds it, which needs no bind verb for the same reason. Whether the
// operator still works under exactly these rules is
// TestInstallOnAPIServer's to prove.
func TestOperatorRBACLeastPrivilege(t *testing.T) {
	forbidden := []string{"bind", "escalate", "impersonate", "*"}
	var found bool
	for _, o := range renderProfile(t, "") {
		if o.Kind != "ClusterRole" && o.Kind != "Role" {
			continue
		}
		found = found || o.Kind == "ClusterRole"
		rules, _ := o.Raw["rules"].([]any)
		for _, r := range rules {
			rule := r.(map[string]any)
			for _, v := range rule["verbs"].([]any) {
				if slices.Contains(forbidden, v.(string)) {
					t.Errorf("%s %s grants %q on %v", o.Kind, o.Metadata.Name, v, rule["resources"])
				}
			}
			for _, res := range rule["resources"].([]any) {
				if res == "*" || res == "secrets" {
					t.Errorf("%s %s grants %v on %q", o.Kind, o.Metadata.Name, rule["verbs"], res)
				}
			}
		}
	}
	if !found {
		t.Fatal("no ClusterRole rendered")
	}
}

// dig walks a generic object along keys (map keys, or "0".. for list
// items is not needed here: lists are taken whole).
func dig(m map[string]any, keys ...string) any {
	var v any = m
	for _, k := range keys {
		mm, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = mm[k]
	}
	return v
}

// cacheServerContainer is the cache server workload's container, as a
// generic map.
func cacheServerContainer(t *testing.T, objs []object) map[string]any {
	t.Helper()
	for _, o := range objs {
		if (o.Kind == "DaemonSet" || o.Kind == "StatefulSet") && o.Metadata.Labels["app.kubernetes.io/component"] == "cacheserver" {
			cs, _ := dig(o.Raw, "spec", "template", "spec", "containers").([]any)
			if len(cs) == 1 {
				return cs[0].(map[string]any)
			}
		}
	}
	t.Fatal("no cache server workload rendered")
	return nil
}

func stringsOf(v any) []string {
	l, _ := v.([]any)
	out := make([]string, 0, len(l))
	for _, s := range l {
		out = append(out, s.(string))
	}
	return out
}

func flagValue(args []string, flag string) (string, bool) {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v, true
		}
	}
	return "", false
}

// TestCacheServerAuthOnByDefault: the default install requires a token on
// RESP and on the objects API, from a Secret the chart generates (and
// keeps across upgrades with lookup).
func TestCacheServerAuthOnByDefault(t *testing.T) {
	objs := renderProfile(t, "")
	args := stringsOf(cacheServerContainer(t, objs)["args"])
	for _, flag := range []string{"--password-file", "--http-token-file"} {
		if _, ok := flagValue(args, flag); !ok {
			t.Errorf("cache server runs without %s: %v", flag, args)
		}
	}
	var secret bool
	for _, o := range objs {
		if o.Kind == "Secret" && o.Metadata.Name == "wp-warmpath-cacheserver-auth" {
			secret = dig(o.Raw, "data", "token") != nil
		}
	}
	if !secret {
		t.Error("no generated auth Secret with a token")
	}
}

// TestCacheServerObjectsAPIOnItsOwnPort: /v1/objects (tenant data) is
// served on a port of its own, so the port Prometheus and the kubelet
// reach (/metrics, /healthz, /readyz) carries no data.
func TestCacheServerObjectsAPIOnItsOwnPort(t *testing.T) {
	forCacheServerProfiles(t, func(t *testing.T, objs []object) {
		args := stringsOf(cacheServerContainer(t, objs)["args"])
		objects, ok := flagValue(args, "--objects-listen")
		if !ok {
			t.Fatalf("no --objects-listen: %v", args)
		}
		http, _ := flagValue(args, "--http-listen")
		if portPart(objects) == portPart(http) {
			t.Fatalf("objects API and metrics share port %s", portPart(http))
		}
	})
}

// forCacheServerProfiles runs check on the rendering of every values
// profile that deploys a cache server (the others are skipped, named).
func forCacheServerProfiles(t *testing.T, check func(t *testing.T, objs []object)) {
	t.Helper()
	for _, p := range profiles {
		t.Run(p.name, func(t *testing.T) {
			objs := renderProfile(t, p.file)
			if !hasCacheServer(objs) {
				t.Skip("no cache server in this profile")
			}
			check(t, objs)
		})
	}
}

func hasCacheServer(objs []object) bool {
	for _, o := range objs {
		if o.Metadata.Labels["app.kubernetes.io/component"] == "cacheserver" && (o.Kind == "DaemonSet" || o.Kind == "StatefulSet") {
			return true
		}
	}
	return false
}

func portPart(addr string) string {
	_, p, _ := strings.Cut(addr, ":")
	return p
}

// TestCacheServerStartupProbe: loading a large disk tier must not be
// killed by the liveness probe: a startup probe gives it its own budget.
func TestCacheServerStartupProbe(t *testing.T) {
	forCacheServerProfiles(t, func(t *testing.T, objs []object) {
		c := cacheServerContainer(t, objs)
		sp, ok := c["startupProbe"].(map[string]any)
		if !ok {
			t.Fatal("cache server has no startupProbe")
		}
		period, _ := sp["periodSeconds"].(float64)
		failures, _ := sp["failureThreshold"].(float64)
		if period*failures < 600 {
			t.Errorf("startup budget %vs × %v is under 10 minutes", period, failures)
		}
	})
}

// workerLabels are the labels the operator sets on every worker pod
// (services/operator/internal/controller/meta.go); managed-by is the
// operator's own field owner, which an arbitrary pod has no reason to
// carry, but it is the namespace scoping below that is the boundary.
var workerLabels = map[string]string{
	"app.kubernetes.io/name":       "warmpath",
	"app.kubernetes.io/component":  "worker",
	"app.kubernetes.io/managed-by": "warmpath-operator",
}

// metricsPort is the cache server's /metrics, /healthz and /readyz port,
// the only port a NetworkPolicy may open beyond the release's workers:
// Prometheus runs in a namespace of its own and the port carries no data.
const metricsPort = 8080

// kvEventsPort and kvSnapshotPort are the cache server's KV-event ports
// (values.yaml cacheserver.ports).
const kvEventsPort, kvSnapshotPort = 5557, 5558

// redisPort is the chart's Redis, which the operator's routers reach too:
// the operator points their shared kvaware index (--kv-index-redis) at a
// Redis L2.
const redisPort = 6379

// TestNetworkPoliciesAdmitOnlyReleaseWorkers: every port carrying KV
// data (lm://, RESP, the objects API, the peer port, Redis) admits only
// the operator's worker pods in the release namespace or in a namespace
// the chart's endpoints live in (matched by kubernetes.io/metadata.name,
// which the API server sets and no tenant can), and the release's own
// cache server pods. No rule admits every namespace, an IP block, or
// every source.
func TestNetworkPoliciesAdmitOnlyReleaseWorkers(t *testing.T) {
	wantPolicies := map[string]int{"default": 1, "sim": 1, "redis": 1, "maximal": 2}
	for _, p := range profiles {
		t.Run(p.name, func(t *testing.T) {
			var n int
			for _, o := range renderProfile(t, p.file) {
				if o.Kind != "NetworkPolicy" {
					continue
				}
				n++
				rules, _ := dig(o.Raw, "spec", "ingress").([]any)
				if len(rules) == 0 {
					t.Errorf("%s admits nothing: the workers cannot reach it", o.Metadata.Name)
				}
				for i, r := range rules {
					checkIngressRule(t, o.Metadata.Name, i, r.(map[string]any))
				}
			}
			if n != wantPolicies[p.name] {
				t.Errorf("%d NetworkPolicies, want %d", n, wantPolicies[p.name])
			}
		})
	}
}

func checkIngressRule(t *testing.T, policy string, i int, rule map[string]any) {
	t.Helper()
	ports, _ := rule["ports"].([]any)
	metricsOnly, routerPorts := len(ports) > 0, len(ports) > 0
	for _, p := range ports {
		port, _ := p.(map[string]any)["port"].(float64)
		if port != metricsPort {
			metricsOnly = false
		}
		if port != kvEventsPort && port != kvSnapshotPort && (port != redisPort || !strings.HasSuffix(policy, "-redis")) {
			routerPorts = false
		}
	}
	from, _ := rule["from"].([]any)
	if len(from) == 0 {
		if !metricsOnly {
			t.Errorf("%s rule %d admits every source on %v", policy, i, ports)
		}
		return
	}
	for _, f := range from {
		peer := f.(map[string]any)
		if peer["ipBlock"] != nil {
			t.Errorf("%s rule %d admits an IP block: %v", policy, i, peer)
			continue
		}
		if metricsOnly {
			continue
		}
		if ns, ok := peer["namespaceSelector"].(map[string]any); ok {
			ml, _ := ns["matchLabels"].(map[string]any)
			if len(ns) != 1 || len(ml) != 1 || ml["kubernetes.io/metadata.name"] == nil {
				t.Errorf("%s rule %d: namespaceSelector %v is not one named namespace", policy, i, ns)
			}
		}
		ml, _ := dig(peer, "podSelector", "matchLabels").(map[string]any)
		// A peer is the release's own cache server, in its own namespace
		// (no namespaceSelector).
		isPeer := ml["app.kubernetes.io/instance"] == "wp" && ml["app.kubernetes.io/component"] == "cacheserver" && peer["namespaceSelector"] == nil
		isWorker, isRouter := true, true
		for k, v := range workerLabels {
			if ml[k] != v {
				isWorker = false
			}
			if k == "app.kubernetes.io/component" {
				v = "router" // the routers carry the workers' labels but this one
			}
			if ml[k] != v {
				isRouter = false
			}
		}
		// The operator's routers, to the cache server's KV-event stream
		// and snapshot only (they carry chunk hashes, never a value), and
		// to the chart's Redis, where they keep their kvaware index.
		if isRouter && !routerPorts {
			t.Errorf("%s rule %d admits the routers to more than the KV-event ports and Redis: %v", policy, i, ports)
		}
		if !isWorker && !isPeer && !isRouter {
			t.Errorf("%s rule %d admits pods that are neither the operator's workers or routers nor the release's cache servers: %v", policy, i, peer)
		}
	}
}

// TestRedisAdmitsWorkers: the chart's Redis answers remote workers. Run
// through `sh -c`, redis-server misses the image entrypoint's
// `--protected-mode no`, and Redis 7 without a password then answers
// DENIED to every client not on loopback; so without a password the
// command must say so itself. With one (the default), the password reaches
// Redis on stdin (not argv) and the workers through a Secret reference on
// the endpoint, never as text in the CR's URL.
func TestRedisAdmitsWorkers(t *testing.T) {
	tests := []struct {
		name string
		auth bool
	}{
		{"password (default)", true},
		{"no password", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vals := loadValues(t, "ci/redis-values.yaml")
			if !tt.auth {
				vals["redis"].(map[string]any)["auth"] = map[string]any{"enabled": false}
			}
			out, err := render(t, vals)
			if err != nil {
				t.Fatal(err)
			}
			var redis map[string]any
			var endpoint map[string]any
			for _, o := range objects(t, out) {
				switch {
				case o.Kind == "StatefulSet" && o.Metadata.Labels["app.kubernetes.io/component"] == "redis":
					redis = dig(o.Raw, "spec", "template", "spec", "containers").([]any)[0].(map[string]any)
				case o.Kind == "InferenceEndpointConfig":
					endpoint = o.Raw
				}
			}
			if redis == nil || endpoint == nil {
				t.Fatal("no Redis StatefulSet or no endpoint rendered")
			}
			cmd := strings.Join(append(stringsOf(redis["command"]), stringsOf(redis["args"])...), " ")
			l2, _ := dig(endpoint, "spec", "kvCacheSpec", "l2CacheSpec").(map[string]any)
			url, _ := l2["l2CacheLocalUrl"].(string)
			if strings.Contains(url, "@") {
				t.Errorf("endpoint URL carries credentials: %s", url)
			}
			ref, _ := l2["passwordSecretRef"].(map[string]any)
			if !tt.auth {
				if !strings.Contains(cmd, "--protected-mode no") {
					t.Errorf("no password and protected mode left on: %s", cmd)
				}
				if ref != nil {
					t.Errorf("passwordSecretRef %v without a password", ref)
				}
				return
			}
			if strings.Contains(cmd, "--requirepass") {
				t.Errorf("password on redis-server's command line: %s", cmd)
			}
			if !strings.Contains(cmd, "requirepass") {
				t.Errorf("Redis runs without its password: %s", cmd)
			}
			if ref["name"] != "wp-warmpath-redis" || ref["key"] != "password" {
				t.Errorf("endpoint passwordSecretRef = %v, want the chart's Redis Secret", ref)
			}
		})
	}
}

// TestCacheServerDiskHeadroom: the disk tier's byte accounting ignores
// block rounding and the temporary file written before an eviction, so
// the volume (emptyDir sizeLimit, PVC request) must be larger than
// --disk-capacity-bytes: at least a tenth plus one largest object (256 MiB).
// At the bound itself, the kubelet evicts the pod (emptyDir) or writes
// fail (PVC).
func TestCacheServerDiskHeadroom(t *testing.T) {
	forCacheServerProfiles(t, func(t *testing.T, objs []object) {
		args := stringsOf(cacheServerContainer(t, objs)["args"])
		capStr, ok := flagValue(args, "--disk-capacity-bytes")
		if !ok {
			t.Skip("no disk tier")
		}
		capacity, err := strconv.ParseInt(capStr, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		var size string
		for _, o := range objs {
			if (o.Kind != "DaemonSet" && o.Kind != "StatefulSet") || o.Metadata.Labels["app.kubernetes.io/component"] != "cacheserver" {
				continue
			}
			vols, _ := dig(o.Raw, "spec", "template", "spec", "volumes").([]any)
			for _, v := range vols {
				if v := v.(map[string]any); v["name"] == "disk" {
					if s, ok := dig(v, "emptyDir", "sizeLimit").(string); ok {
						size = s
					}
				}
			}
			claims, _ := dig(o.Raw, "spec", "volumeClaimTemplates").([]any)
			for _, c := range claims {
				if s, ok := dig(c.(map[string]any), "spec", "resources", "requests", "storage").(string); ok {
					size = s
				}
			}
		}
		if size == "" {
			t.Skip("disk volume has no size (hostPath)")
		}
		q, err := resource.ParseQuantity(size)
		if err != nil {
			t.Fatal(err)
		}
		if want := capacity + capacity/10 + 256<<20; q.Value() < want {
			t.Errorf("disk volume %s (%d bytes) leaves under a tenth plus 256 MiB over --disk-capacity-bytes=%d (want ≥ %d)", size, q.Value(), capacity, want)
		}
	})
}

// TestRedisAdmitsRouters: the operator points its routers' shared kvaware
// index at a Redis L2, so the chart's Redis admits the release's routers
// on its port beside the workers (with the same password), or they would
// each fall back to their own index.
func TestRedisAdmitsRouters(t *testing.T) {
	for _, o := range renderProfile(t, "ci/redis-values.yaml") {
		if o.Kind != "NetworkPolicy" || o.Metadata.Labels["app.kubernetes.io/component"] != "redis" {
			continue
		}
		rules, _ := dig(o.Raw, "spec", "ingress").([]any)
		for _, r := range rules {
			ports, _ := r.(map[string]any)["ports"].([]any)
			from, _ := r.(map[string]any)["from"].([]any)
			for _, f := range from {
				c, _ := dig(f.(map[string]any), "podSelector", "matchLabels", "app.kubernetes.io/component").(string)
				if c == "router" && len(ports) == 1 && dig(ports[0].(map[string]any), "port") == float64(redisPort) {
					return
				}
			}
		}
		t.Fatalf("the Redis NetworkPolicy admits no router on %d: %v", redisPort, rules)
	}
	t.Fatal("no Redis NetworkPolicy rendered")
}
