// Package chart tests the umbrella Helm chart through the Helm SDK: lint,
// render per values profile against golden files, and schema validation.
package chart

import (
	"flag"
	"io"
	"log"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// chartDir is the chart, relative to this package.
var chartDir = filepath.Join("..", "..", "charts", "warmpath")

// profiles are the values files the chart is tested with ("" = defaults).
var profiles = []struct{ name, file string }{
	{"default", ""},
	{"sim", "values-sim.yaml"},
	{"redis", "ci/redis-values.yaml"},
	{"maximal", "ci/maximal-values.yaml"},
}

func loadValues(t *testing.T, file string) map[string]any {
	t.Helper()
	if file == "" {
		return map[string]any{}
	}
	v, err := chartutil.ReadValuesFile(filepath.Join(chartDir, file))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func loadChart(t *testing.T) *chart.Chart {
	t.Helper()
	c, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("load chart: %v", err)
	}
	return c
}

// render installs the chart client-side (nothing contacts a cluster) and
// returns the manifests, hooks included, as one YAML stream.
func render(t *testing.T, vals map[string]any, apiVersions ...string) (string, error) {
	t.Helper()
	install := action.NewInstall(&action.Configuration{})
	install.ClientOnly = true
	install.DryRun = true
	install.ReleaseName = "wp"
	install.Namespace = "warmpath"
	install.KubeVersion = &chartutil.KubeVersion{Version: "v1.31.0", Major: "1", Minor: "31"}
	install.APIVersions = apiVersions
	// The CRD is the operator's generated file (crds/ links to it); it is
	// checked by TestCRDIsTheOperators, not repeated in every golden file.
	install.IncludeCRDs = false
	rel, err := install.Run(loadChart(t), vals)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString(rel.Manifest)
	for _, h := range rel.Hooks {
		b.WriteString("---\n# Source: " + h.Path + "\n" + h.Manifest + "\n")
	}
	return b.String(), nil
}

func TestLint(t *testing.T) {
	for _, p := range profiles {
		t.Run(p.name, func(t *testing.T) {
			l := lint.All(chartDir, loadValues(t, p.file), "warmpath", false)
			for _, m := range l.Messages {
				if m.Severity >= support.WarningSev {
					t.Errorf("lint: %s", m)
				}
			}
		})
	}
}

func TestRenderGolden(t *testing.T) {
	for _, p := range profiles {
		t.Run(p.name, func(t *testing.T) {
			out, err := render(t, loadValues(t, p.file))
			if err != nil {
				t.Fatalf("render: %v", err)
			}
			checkDocuments(t, out)
			out = scrubGenerated(out)
			golden := filepath.Join("testdata", p.name+".golden.yaml")
			if *update {
				//nolint:gosec // a committed, world-readable text file
				if err := os.WriteFile(golden, []byte(out), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./tests/chart -update)", err)
			}
			if string(want) != out {
				t.Errorf("rendered manifests differ from %s; if the change is intended, run `make golden`\n%s", golden, firstDiff(string(want), out))
			}
		})
	}
}

// generated matches what the chart makes up at install time (random
// tokens and passwords, until lookup finds the Secret on an upgrade) and
// the pod annotations derived from them.
var generated = regexp.MustCompile(`(?m)^(  (?:token|password): |\s+checksum/auth: ).+$`)

// scrubGenerated replaces generated values, so the golden files are
// stable.
func scrubGenerated(out string) string { return generated.ReplaceAllString(out, "${1}<generated>") }

// checkDocuments asserts every rendered document is a Kubernetes object
// carrying the chart's labels, and every container the secure defaults.
func checkDocuments(t *testing.T, stream string) {
	t.Helper()
	for _, doc := range strings.Split(stream, "\n---") {
		doc = strings.TrimPrefix(doc, "---")
		if strings.TrimSpace(stripComments(doc)) == "" {
			continue
		}
		var obj struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name   string            `json:"name"`
				Labels map[string]string `json:"labels"`
			} `json:"metadata"`
			Spec struct {
				Template struct {
					Spec podSpec `json:"spec"`
				} `json:"template"`
				podSpec `json:",inline"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatalf("document is not YAML: %v\n%s", err, doc)
		}
		if obj.APIVersion == "" || obj.Kind == "" || obj.Metadata.Name == "" {
			t.Errorf("document without apiVersion, kind or name:\n%s", doc)
			continue
		}
		if obj.Kind == "CustomResourceDefinition" {
			continue
		}
		if obj.Metadata.Labels["app.kubernetes.io/part-of"] != "warmpath" {
			t.Errorf("%s %s lacks the chart's labels", obj.Kind, obj.Metadata.Name)
		}
		pod := obj.Spec.Template.Spec
		if obj.Kind == "Pod" {
			pod = obj.Spec.podSpec
		}
		for _, c := range pod.Containers {
			sc := c.SecurityContext
			if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
				len(sc.Capabilities.Drop) == 0 || sc.Capabilities.Drop[0] != "ALL" {
				t.Errorf("%s %s container %s is not locked down: %+v", obj.Kind, obj.Metadata.Name, c.Name, sc)
			}
			if len(c.Resources.Requests) == 0 {
				t.Errorf("%s %s container %s has no resource requests", obj.Kind, obj.Metadata.Name, c.Name)
			}
		}
		if len(pod.Containers) > 0 && (pod.SecurityContext.RunAsNonRoot == nil || !*pod.SecurityContext.RunAsNonRoot) {
			t.Errorf("%s %s may run as root", obj.Kind, obj.Metadata.Name)
		}
	}
}

type podSpec struct {
	SecurityContext struct {
		RunAsNonRoot *bool `json:"runAsNonRoot"`
	} `json:"securityContext"`
	Containers []struct {
		Name            string `json:"name"`
		SecurityContext struct {
			AllowPrivilegeEscalation *bool `json:"allowPrivilegeEscalation"`
			ReadOnlyRootFilesystem   *bool `json:"readOnlyRootFilesystem"`
			Capabilities             struct {
				Drop []string `json:"drop"`
			} `json:"capabilities"`
		} `json:"securityContext"`
		Resources struct {
			Requests map[string]any `json:"requests"`
		} `json:"resources"`
	} `json:"containers"`
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, line := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

// firstDiff shows the first differing line of two texts, for a readable
// failure.
func firstDiff(want, got string) string {
	wl, gl := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < len(wl) || i < len(gl); i++ {
		var w, g string
		if i < len(wl) {
			w = wl[i]
		}
		if i < len(gl) {
			g = gl[i]
		}
		if w != g {
			return "line " + strconv.Itoa(i+1) + ":\n  want: " + w + "\n  got:  " + g
		}
	}
	return ""
}

// TestCRDIsTheOperators: the chart ships exactly the operator's generated
// CRD, through the crds/ link, so the two cannot drift.
func TestCRDIsTheOperators(t *testing.T) {
	crds := loadChart(t).CRDObjects()
	if len(crds) != 1 {
		t.Fatalf("%d CRDs in the chart, want 1", len(crds))
	}
	want, err := os.ReadFile(filepath.Join("..", "..", "services", "operator", "config", "crd", "inference.warmpath.io_inferenceendpointconfigs.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if string(crds[0].File.Data) != string(want) {
		t.Fatal("the chart's CRD differs from the operator's generated one")
	}
}

// TestServiceMonitorsFollowTheAPI: with monitoring.serviceMonitors.enabled
// "auto" (the default), ServiceMonitors render exactly when the cluster
// serves monitoring.coreos.com/v1.
func TestServiceMonitorsFollowTheAPI(t *testing.T) {
	without, err := render(t, map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	with, err := render(t, map[string]any{}, "monitoring.coreos.com/v1/ServiceMonitor")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(without, "kind: ServiceMonitor") {
		t.Error("ServiceMonitor rendered although the API is not served")
	}
	if !strings.Contains(with, "kind: ServiceMonitor") {
		t.Error("no ServiceMonitor although the API is served")
	}
}

// TestSchemaRejects: bad values fail the install with a message naming the
// offending value.
func TestSchemaRejects(t *testing.T) {
	tests := []struct {
		name string
		vals string
		want string
	}{
		{"unknown top-level key", "cacheServer: {enabled: true}", "cacheServer"},
		{"bad workload kind", "cacheserver: {kind: Deployment}", "kind"},
		{"memory capacity not a quantity", "cacheserver: {memoryCapacity: -5}", "memoryCapacity"},
		{"replication out of range", "cacheserver: {replication: 3}", "replication"},
		{"port out of range", "cacheserver: {ports: {lm: 70000, resp: 6379, http: 8080, peer: 65433}}", "lm"},
		{"bad capacity", "cacheserver: {memoryCapacity: lots}", "memoryCapacity"},
		{"bad volume type", "cacheserver: {disk: {enabled: true, volumeType: nfs}}", "volumeType"},
		{"ttl not a duration", "cacheserver: {ttl: forever}", "ttl"},
		{"unknown tls key", "cacheserver: {tls: {enabled: true, secret: x}}", "secret"},
		{"monitoring not auto/true/false", "monitoring: {serviceMonitors: {enabled: sometimes}}", "enabled"},
		{"bad strategy", "endpoints: [{name: e, spec: {modelName: m, modelSourceConfig: {}, worker: {image: i}, intelligentRoutingSpec: {routingStrategy: fastest}}}]", "routingStrategy"},
		{"bad endpoint name", "endpoints: [{name: Bad_Name, spec: {modelName: m, modelSourceConfig: {}, worker: {image: i}}}]", "name"},
		{"endpoint without worker", "endpoints: [{name: e, spec: {modelName: m, modelSourceConfig: {}}}]", "worker"},
		{"bad pull policy", "images: {pullPolicy: Sometimes}", "pullPolicy"},
		{"objects port out of range", "cacheserver: {ports: {objects: 0}}", "objects"},
		{"worker namespace not a DNS label", "cacheserver: {networkPolicy: {extraWorkerNamespaces: [Bad_NS]}}", "extraWorkerNamespaces"},
		{"startup probe without checks", "cacheserver: {startupProbe: {failureThreshold: 0}}", "failureThreshold"},
		{"bad toleration operator", "operator: {tolerations: [{key: k, operator: Maybe}]}", "tolerations"},
		{"spread without a topology key", "cacheserver: {topologySpreadConstraints: [{maxSkew: 1, whenUnsatisfiable: DoNotSchedule}]}", "topologySpreadConstraints"},
		{"priority class not a string", "operator: {priorityClassName: 5}", "priorityClassName"},
		{"runtime class not a name", "cacheserver: {runtimeClassName: Not_A_Name}", "runtimeClassName"},
		{"pull secret without a name", "operator: {imagePullSecrets: [{}]}", "imagePullSecrets"},
		{"unknown affinity kind", "cacheserver: {affinity: {nodeAfinity: {}}}", "nodeAfinity"},
		{"bad instanceType", "endpoints: [{name: e, spec: {modelName: m, instanceType: 'ml g5', modelSourceConfig: {}, worker: {image: i}}}]", "instanceType"},
		{"unknown worker scheduling key", "endpoints: [{name: e, spec: {modelName: m, modelSourceConfig: {}, worker: {image: i, scheduling: {nodeSelectors: {}}}}}]", "nodeSelectors"},
		{"empty router runtime class", "endpoints: [{name: e, spec: {modelName: m, modelSourceConfig: {}, worker: {image: i}, intelligentRoutingSpec: {routerScheduling: {runtimeClassName: ''}}}}]", "runtimeClassName"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vals, err := chartutil.ReadValues([]byte(tt.vals))
			if err != nil {
				t.Fatal(err)
			}
			_, err = render(t, vals)
			if err == nil {
				t.Fatalf("values accepted: %s", tt.vals)
			}
			if !strings.Contains(err.Error(), "values don't meet the specifications of the schema") || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error does not name %q: %v", tt.want, err)
			}
		})
	}
}

// TestMain silences the Helm loader's note about the dashboards symlink,
// which is intended: the chart reads the one committed copy.
func TestMain(m *testing.M) {
	log.SetOutput(io.Discard)
	os.Exit(m.Run())
}
