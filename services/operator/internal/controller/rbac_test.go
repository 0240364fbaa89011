package controller_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestRBACIsCurrent regenerates the ClusterRole from the rbac markers
// with the pinned controller-gen and compares it with config/rbac.
func TestRBACIsCurrent(t *testing.T) {
	if testing.Short() {
		t.Skip("runs controller-gen; not run with -short")
	}
	// Run generate.go's own command, with the output redirected.
	src, err := os.ReadFile("generate.go")
	if err != nil {
		t.Fatal(err)
	}
	const prefix = "//go:generate go "
	i := bytes.Index(src, []byte(prefix))
	if i < 0 {
		t.Fatal("generate.go has no //go:generate go line")
	}
	line, _, _ := bytes.Cut(src[i+len(prefix):], []byte("\n"))
	out := t.TempDir()
	var args []string
	for _, f := range strings.Fields(string(line)) {
		if strings.HasPrefix(f, "output:rbac:artifacts:config=") {
			f = "output:rbac:artifacts:config=" + out
		}
		args = append(args, f)
	}
	cmd := exec.Command("go", args...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("controller-gen: %v\n%s", err, b)
	}
	got, err := os.ReadFile(filepath.Join(out, "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join("..", "..", "config", "rbac", "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("config/rbac/role.yaml is stale: run `make generate` and commit the result")
	}
}
