package controller_test

import (
	"path/filepath"
	"testing"

	"github.com/warmpath/warmpath/services/operator/internal/gencheck"
)

// TestRBACIsCurrent regenerates the ClusterRole from the rbac markers with
// the pinned controller-gen and compares it with config/rbac.
func TestRBACIsCurrent(t *testing.T) {
	out := gencheck.Regenerate(t)
	gencheck.Same(t, out, "role.yaml", filepath.Join("..", "..", "config", "rbac", "role.yaml"))
}
