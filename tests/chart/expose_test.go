package chart

import (
	"reflect"
	"testing"
)

// TestEndpointExposureRenders: an endpoint's ingress and httpRoute reach
// the InferenceEndpointConfig as written; the operator makes the Ingress
// and HTTPRoute from them.
func TestEndpointExposureRenders(t *testing.T) {
	const ingress = `{className: nginx, host: llm.example.com, path: /, tlsSecretName: edge-tls,
    annotations: {nginx.ingress.kubernetes.io/backend-protocol: HTTPS}}`
	const route = `{parentRefs: [{name: edge, namespace: gateways, sectionName: https}], hostnames: [llm.example.com],
    annotations: {example.com/team: inference}}`
	spec := endpointSpec(t, renderWith(t, `endpoints:
- name: e
  spec:
    modelName: m
    modelSourceConfig: {modelSourceType: huggingface, huggingFaceModel: {modelId: org/m}}
    intelligentRoutingSpec:
      enabled: true
      tlsSecretName: router-tls
      ingress: `+ingress+`
      httpRoute: `+route+`
    worker: {image: i}
`), "e")
	for _, f := range []struct{ field, want string }{{"ingress", ingress}, {"httpRoute", route}} {
		if got, want := dig(spec, "intelligentRoutingSpec", f.field), fromYAML(t, f.want); !reflect.DeepEqual(got, want) {
			t.Errorf("intelligentRoutingSpec.%s = %v\nwant %v", f.field, got, want)
		}
	}
}
