package v1alpha1_test

import (
	"os"
	"path/filepath"
	"testing"

	"sigs.k8s.io/yaml"
)

// lastAppliedLimit is the API server's bound on all of an object's
// annotations together (256 KiB). A client-side `kubectl apply` stores the
// whole object as compact JSON in one of them, so a CRD whose JSON is
// larger can only be applied server-side.
const lastAppliedLimit = 256 << 10

// TestCRDFitsClientSideApply: the CRD (with the field descriptions that
// `kubectl explain` shows, and the core/v1 scheduling types embedded twice)
// must stay within what `kubectl apply -f config/crd` can store. When a new
// field pushes it over, drop descriptions or embedded schemas rather than
// breaking that install path.
func TestCRDFitsClientSideApply(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "config", "crd", "inference.warmpath.io_inferenceendpointconfigs.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	js, err := yaml.YAMLToJSON(raw)
	if err != nil {
		t.Fatalf("the CRD is not YAML: %v", err)
	}
	if len(js) >= lastAppliedLimit {
		t.Errorf("the CRD is %d bytes of JSON, over the %d bytes of annotations a client-side kubectl apply needs", len(js), lastAppliedLimit)
	}
	t.Logf("CRD: %d bytes of JSON, %d left for kubectl apply's annotation", len(js), lastAppliedLimit-len(js))
}
