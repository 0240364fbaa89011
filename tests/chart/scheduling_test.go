package chart

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chartutil"
	"sigs.k8s.io/yaml"
)

// renderWith renders the chart with values given as YAML.
func renderWith(t *testing.T, values string) []object {
	t.Helper()
	vals, err := chartutil.ReadValues([]byte(values))
	if err != nil {
		t.Fatalf("values: %v\n%s", err, values)
	}
	out, err := render(t, vals)
	if err != nil {
		t.Fatalf("render: %v\nvalues:\n%s", err, values)
	}
	checkDocuments(t, out)
	return objects(t, out)
}

// fromYAML decodes a YAML fragment as a rendered manifest's fields are
// decoded, so the two compare with reflect.DeepEqual.
func fromYAML(t *testing.T, s string) any {
	t.Helper()
	var v any
	if err := yaml.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("%v\n%s", err, s)
	}
	return v
}

// workload finds the rendered workload of a component.
func workload(t *testing.T, objs []object, kind, component string) map[string]any {
	t.Helper()
	for _, o := range objs {
		if o.Kind == kind && o.Metadata.Labels["app.kubernetes.io/component"] == component {
			return o.Raw
		}
	}
	t.Fatalf("no %s of component %s rendered", kind, component)
	return nil
}

// TestSchedulingKnobsRender sets each scheduling value of each workload
// the chart runs and finds it in the rendered pod spec: the cache server
// (as a DaemonSet and as a StatefulSet) and the operator.
func TestSchedulingKnobsRender(t *testing.T) {
	components := []struct {
		name, values, kind, component, extra string
	}{
		{"operator", "operator", "Deployment", "operator", ""},
		{"cache server DaemonSet", "cacheserver", "DaemonSet", "cacheserver", ""},
		{"cache server StatefulSet", "cacheserver", "StatefulSet", "cacheserver", "kind: StatefulSet"},
	}
	knobs := []struct {
		name    string
		value   string // the component's value, YAML
		global  string // top-level values, YAML
		field   string // the pod spec field (container's for resources)
		want    string // what it holds, YAML; COMPONENT stands for the component's name
		inCtnr  bool
		wantNil bool
	}{
		{name: "nodeSelector", value: "nodeSelector: {pool: inference}", field: "nodeSelector", want: "{pool: inference}"},
		{name: "tolerations", value: "tolerations: [{key: dedicated, operator: Equal, value: cache, effect: NoSchedule}]",
			field: "tolerations", want: "[{key: dedicated, operator: Equal, value: cache, effect: NoSchedule}]"},
		{name: "affinity", value: "affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: zone, operator: In, values: [a]}]}]}}}",
			field: "affinity", want: "{nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: zone, operator: In, values: [a]}]}]}}}"},
		{name: "priorityClassName", value: "priorityClassName: warmpath-critical", field: "priorityClassName", want: "warmpath-critical"},
		{name: "runtimeClassName", value: "runtimeClassName: gvisor", field: "runtimeClassName", want: "gvisor"},
		{name: "imagePullSecrets after the chart's", value: "imagePullSecrets: [{name: own}]", global: "imagePullSecrets: [{name: regcred}]",
			field: "imagePullSecrets", want: "[{name: regcred}, {name: own}]"},
		{name: "imagePullSecrets, the chart's alone", global: "imagePullSecrets: [{name: regcred}]", field: "imagePullSecrets", want: "[{name: regcred}]"},
		{name: "imagePullSecrets, none", field: "imagePullSecrets", wantNil: true},
		{name: "topologySpreadConstraints get the pods' labels",
			value: "topologySpreadConstraints: [{maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: ScheduleAnyway}]",
			field: "topologySpreadConstraints",
			want: "[{maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: ScheduleAnyway, labelSelector: {matchLabels: " +
				"{app.kubernetes.io/name: warmpath, app.kubernetes.io/instance: wp, app.kubernetes.io/component: COMPONENT}}}]"},
		{name: "topologySpreadConstraints keep their own selector",
			value: "topologySpreadConstraints: [{maxSkew: 2, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {x: y}}}]",
			field: "topologySpreadConstraints",
			want:  "[{maxSkew: 2, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {x: y}}}]"},
		{name: "resources", value: "resources: {requests: {cpu: 123m, memory: 7Gi}, limits: {memory: 8Gi}}",
			field: "resources", want: "{requests: {cpu: 123m, memory: 7Gi}, limits: {memory: 8Gi}}", inCtnr: true},
	}
	for _, c := range components {
		for _, k := range knobs {
			t.Run(c.name+"/"+k.name, func(t *testing.T) {
				// An empty component key would be null, which replaces the
				// chart's defaults for the whole component.
				comp := strings.TrimSpace(c.extra + "\n  " + k.value)
				if comp == "" {
					comp = "{}"
				}
				vals := fmt.Sprintf("%s\n%s:\n  %s\n", k.global, c.values, comp)
				pod, _ := dig(workload(t, renderWith(t, vals), c.kind, c.component), "spec", "template", "spec").(map[string]any)
				got := pod[k.field]
				if k.inCtnr {
					got = pod["containers"].([]any)[0].(map[string]any)[k.field]
				}
				if k.wantNil {
					if got != nil {
						t.Fatalf("%s = %v, want none", k.field, got)
					}
					return
				}
				want := fromYAML(t, strings.ReplaceAll(k.want, "COMPONENT", c.component))
				if !reflect.DeepEqual(got, want) {
					t.Errorf("%s = %v\nwant %v", k.field, got, want)
				}
			})
		}
	}
}

// endpointSpec is the rendered InferenceEndpointConfig's spec.
func endpointSpec(t *testing.T, objs []object, name string) map[string]any {
	t.Helper()
	for _, o := range objs {
		if o.Kind == "InferenceEndpointConfig" && o.Metadata.Name == name {
			return o.Raw["spec"].(map[string]any)
		}
	}
	t.Fatalf("no InferenceEndpointConfig %s rendered", name)
	return nil
}

// TestEndpointSchedulingRenders: an endpoint's scheduling fields reach
// the InferenceEndpointConfig as written (the operator applies them to
// its pods), and the chart-wide imagePullSecrets reach the pods that run
// warmpath's own images (routers; simulated workers) unless the endpoint
// names its own.
func TestEndpointSchedulingRenders(t *testing.T) {
	const knobs = `{nodeSelector: {pool: gpu}, tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}],
    affinity: {podAntiAffinity: {preferredDuringSchedulingIgnoredDuringExecution: [{weight: 1, podAffinityTerm: {topologyKey: kubernetes.io/hostname}}]}},
    priorityClassName: high, runtimeClassName: nvidia, imagePullSecrets: [{name: vllm-pull}],
    topologySpreadConstraints: [{maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: ScheduleAnyway}],
    resources: {limits: {nvidia.com/gpu: "1"}}}`
	endpoint := func(extra, worker, routing string) string {
		return fmt.Sprintf(`endpoints:
- name: e
  %s
  spec:
    modelName: m
    instanceType: ml.g5.8xlarge
    modelSourceConfig: {modelSourceType: huggingface, huggingFaceModel: {modelId: org/m}}
    intelligentRoutingSpec: %s
    worker: %s
`, extra, routing, worker)
	}
	tests := []struct {
		name, values     string
		routerScheduling string // want, YAML; "" for none
		workerScheduling string
	}{
		{"every knob, as written",
			endpoint("", "{image: i, scheduling: "+knobs+"}", "{enabled: true, routerScheduling: "+knobs+"}"),
			knobs, knobs},
		{"chart's pull secrets to the router",
			"imagePullSecrets: [{name: regcred}]\n" + endpoint("", "{image: i}", "{enabled: true}"),
			"{imagePullSecrets: [{name: regcred}]}", ""},
		{"the router's own pull secrets kept",
			"imagePullSecrets: [{name: regcred}]\n" + endpoint("", "{image: i}", "{enabled: true, routerScheduling: {imagePullSecrets: [{name: mine}], priorityClassName: p}}"),
			"{imagePullSecrets: [{name: mine}], priorityClassName: p}", ""},
		{"no router, no router scheduling",
			"imagePullSecrets: [{name: regcred}]\n" + endpoint("", "{image: i}", "{enabled: false}"), "", ""},
		{"simulated by annotation: vllm-sim gets the chart's pull secrets",
			"imagePullSecrets: [{name: regcred}]\n" + endpoint(`annotations: {inference.warmpath.io/simulate: "true"}`, "{image: i, scheduling: {priorityClassName: p}}", "{enabled: false}"),
			"", "{imagePullSecrets: [{name: regcred}], priorityClassName: p}"},
		{"simulated by spec",
			"imagePullSecrets: [{name: regcred}]\n" + endpoint("", "{image: i}", "{enabled: false}\n    simulate: true"),
			"", "{imagePullSecrets: [{name: regcred}]}"},
		{"no chart pull secrets, nothing added", endpoint("", "{image: i}", "{enabled: true}"), "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := endpointSpec(t, renderWith(t, tt.values), "e")
			if spec["instanceType"] != "ml.g5.8xlarge" {
				t.Errorf("instanceType = %v", spec["instanceType"])
			}
			for _, f := range []struct {
				what string
				got  any
				want string
			}{
				{"intelligentRoutingSpec.routerScheduling", dig(spec, "intelligentRoutingSpec", "routerScheduling"), tt.routerScheduling},
				{"worker.scheduling", dig(spec, "worker", "scheduling"), tt.workerScheduling},
			} {
				var want any
				if f.want != "" {
					want = fromYAML(t, f.want)
				}
				if !reflect.DeepEqual(f.got, want) {
					t.Errorf("%s = %v\nwant %v", f.what, f.got, want)
				}
			}
		})
	}
}

// TestHelmTestPodPlacement: the `helm test` pod takes tests.nodeSelector and
// tests.tolerations; on a cluster whose every node is tainted (a GPU pool)
// it cannot schedule without them, and `helm test` times out (found on the
// e2e node).
func TestHelmTestPodPlacement(t *testing.T) {
	vals := "tests:\n  image: curl:1\n  nodeSelector: {pool: gpu}\n  tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]\n"
	var pods int
	for _, o := range renderWith(t, vals) {
		if o.Kind != "Pod" {
			continue
		}
		pods++
		spec := o.Raw["spec"].(map[string]any)
		if want := fromYAML(t, "{pool: gpu}"); !reflect.DeepEqual(spec["nodeSelector"], want) {
			t.Errorf("%s nodeSelector = %v, want %v", o.Metadata.Name, spec["nodeSelector"], want)
		}
		if want := fromYAML(t, "[{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]"); !reflect.DeepEqual(spec["tolerations"], want) {
			t.Errorf("%s tolerations = %v, want %v", o.Metadata.Name, spec["tolerations"], want)
		}
	}
	if pods == 0 {
		t.Fatal("no helm test pod rendered")
	}
}
