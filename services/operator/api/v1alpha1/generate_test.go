package v1alpha1_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestGeneratedFilesAreCurrent runs generate.go's controller-gen command
// (pinned there) with its output sent to a scratch directory and fails
// when the committed deepcopy code or CRD differs: run `make generate` and
// commit the result.
func TestGeneratedFilesAreCurrent(t *testing.T) {
	if testing.Short() {
		t.Skip("runs controller-gen; not run with -short")
	}
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
		if strings.HasPrefix(f, "output:crd:artifacts:config=") {
			continue
		}
		args = append(args, f)
	}
	// Both generators write to out; deepcopy code is package-associated
	// ("code"), the CRD is not ("config").
	args = append(args, "output:artifacts:code="+out+",config="+out)
	cmd := exec.Command("go", args...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("controller-gen %v: %v\n%s", args, err, b)
	}
	for got, want := range map[string]string{
		"zz_generated.deepcopy.go":                            "zz_generated.deepcopy.go",
		"inference.warmpath.io_inferenceendpointconfigs.yaml": filepath.Join("..", "..", "config", "crd", "inference.warmpath.io_inferenceendpointconfigs.yaml"),
	} {
		g, err := os.ReadFile(filepath.Join(out, got))
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
}
