package v1alpha1_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestGeneratedFilesAreCurrent regenerates the deepcopy functions and the
// CRD with the pinned controller-gen (the //go:generate line in
// generate.go) into a scratch copy and fails when the committed files
// differ: run `make generate` and commit the result.
func TestGeneratedFilesAreCurrent(t *testing.T) {
	if testing.Short() {
		t.Skip("runs controller-gen; not run with -short")
	}
	src, err := os.ReadFile("generate.go")
	if err != nil {
		t.Fatal(err)
	}
	const prefix = "//go:generate go run "
	i := bytes.Index(src, []byte(prefix))
	if i < 0 {
		t.Fatal("generate.go has no //go:generate go run line")
	}
	line := string(src[i+len(prefix):])
	line = line[:bytes.IndexByte([]byte(line), '\n')]
	fields := bytes.Fields([]byte(line))
	out := t.TempDir()
	args := []string{"run", string(fields[0])}
	for _, f := range fields[1:] {
		a := string(f)
		if a == "output:crd:artifacts:config=../../config/crd" {
			a = "output:crd:artifacts:config=" + out
		}
		args = append(args, a)
	}
	// controller-gen writes deepcopy next to the types: run it on a copy.
	pkg := t.TempDir()
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		b, err := os.ReadFile(e.Name())
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(pkg, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The copy must stay inside the module for the packages to load.
	mod := filepath.Join("..", "..", "api", "zz_gencheck_"+filepath.Base(pkg))
	if err := os.CopyFS(mod, os.DirFS(pkg)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(mod) })
	cmd := exec.Command("go", args...)
	cmd.Dir = mod
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("controller-gen: %v\n%s", err, b)
	}
	compare := func(got, want string) {
		g, err := os.ReadFile(got)
		if err != nil {
			t.Fatal(err)
		}
		w, err := os.ReadFile(want)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(g, w) {
			t.Errorf("%s is stale: run `make generate` and commit the result", want)
		}
	}
	compare(filepath.Join(mod, "zz_generated.deepcopy.go"), "zz_generated.deepcopy.go")
	compare(filepath.Join(out, "inference.warmpath.io_inferenceendpointconfigs.yaml"), filepath.Join("..", "..", "config", "crd", "inference.warmpath.io_inferenceendpointconfigs.yaml"))
}
