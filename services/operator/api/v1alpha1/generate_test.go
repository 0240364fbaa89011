package v1alpha1_test

import (
	"path/filepath"
	"testing"

	"github.com/warmpath/warmpath/services/operator/internal/gencheck"
)

// TestGeneratedFilesAreCurrent fails when the committed deepcopy code or
// CRD differs from what generate.go's controller-gen command writes: run
// `make generate` and commit the result.
func TestGeneratedFilesAreCurrent(t *testing.T) {
	out := gencheck.Regenerate(t)
	gencheck.Same(t, out, "zz_generated.deepcopy.go", "zz_generated.deepcopy.go")
	gencheck.Same(t, out, "inference.warmpath.io_inferenceendpointconfigs.yaml",
		filepath.Join("..", "..", "config", "crd", "inference.warmpath.io_inferenceendpointconfigs.yaml"))
}
