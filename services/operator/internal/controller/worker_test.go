package controller

import (
	"slices"
	"testing"

	v1alpha1 "github.com/warmpath/warmpath/services/operator/api/v1alpha1"
)

func TestHubModelArgs(t *testing.T) {
	hub := func(location string) *v1alpha1.InferenceEndpointConfig {
		return &v1alpha1.InferenceEndpointConfig{Spec: v1alpha1.InferenceEndpointConfigSpec{
			ModelSourceConfig: v1alpha1.ModelSourceConfig{
				ModelSourceType: v1alpha1.ModelSourceHuggingFace, ModelLocation: location,
				HuggingFaceModel: &v1alpha1.HuggingFaceModel{ModelID: "org/m"},
			},
			Worker: v1alpha1.WorkerSpec{ModelVolumeMount: &v1alpha1.ModelVolumeMount{Name: "w", MountPath: "/opt/ml/model"}},
		}}
	}
	pvc := hub("")
	pvc.Spec.ModelSourceConfig.ModelSourceType = v1alpha1.ModelSourceKubernetesVolume
	cases := []struct {
		name string
		iec  *v1alpha1.InferenceEndpointConfig
		args []string
		want []string
	}{
		{"separate value", hub(""), []string{"--model", "/opt/ml/model", "--x"}, []string{"--model", "org/m", "--x"}},
		{"trailing slash", hub(""), []string{"--model", "/opt/ml/model/"}, []string{"--model", "org/m"}},
		{"equals form", hub(""), []string{"--model=/opt/ml/model"}, []string{"--model=org/m"}},
		{"with location", hub("sub"), []string{"--model", "/opt/ml/model/sub"}, []string{"--model", "org/m"}},
		{"other path kept", hub(""), []string{"--model", "/elsewhere"}, []string{"--model", "/elsewhere"}},
		{"volume source kept", pvc, []string{"--model", "/opt/ml/model"}, []string{"--model", "/opt/ml/model"}},
		{"value at the end", hub(""), []string{"--model"}, []string{"--model"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := hubModelArgs(tc.iec, slices.Clone(tc.args)); !slices.Equal(got, tc.want) {
				t.Errorf("hubModelArgs(%q) = %q, want %q", tc.args, got, tc.want)
			}
		})
	}
}

func TestURLWithPassword(t *testing.T) {
	const p = "$(" + l2PasswordEnv + ")"
	cases := []struct{ in, want string }{
		{"redis://redis.default.svc:6379", "redis://:" + p + "@redis.default.svc:6379"},
		{"rediss://r:6380/0", "rediss://:" + p + "@r:6380/0"},
		{"redis://alice@r:6379", "redis://alice:" + p + "@r:6379"},
		{"redis-sentinel://a:26379,b:26379/mymaster", "redis-sentinel://:" + p + "@a:26379,b:26379/mymaster"},
		{"resp://cache:6379", "resp://:" + p + "@cache:6379"},
		// a cluster's seeds, the form LMCache's redis-cluster:// connector reads
		{"redis-cluster://alice@a:7000,b:7000,c:7000", "redis-cluster://alice:" + p + "@a:7000,b:7000,c:7000"},
	}
	for _, tc := range cases {
		t.Run(tc.in, func(t *testing.T) {
			if got := urlWithPassword(tc.in); got != tc.want {
				t.Errorf("urlWithPassword(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}
