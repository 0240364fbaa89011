// Package gencheck lets a test tell whether the files a package's
// //go:generate controller-gen line writes are current: it runs that same
// line with the output sent to a scratch directory, so the check uses the
// pinned controller-gen and the options `make generate` uses.
package gencheck

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Regenerate runs the `//go:generate go ...` line of generate.go in the
// current directory (the package under test) with its output: options
// replaced by one writing everything, code and config, to a scratch
// directory, and returns that directory. It skips the test with -short,
// as controller-gen is built and run on the way.
func Regenerate(t *testing.T) string {
	t.Helper()
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
		if !strings.HasPrefix(f, "output:") {
			args = append(args, f)
		}
	}
	// Package-associated output (deepcopy code) is "code", the rest (CRDs,
	// the ClusterRole) "config".
	args = append(args, "output:artifacts:code="+out+",config="+out)
	cmd := exec.CommandContext(t.Context(), "go", args...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("controller-gen %v: %v\n%s", args, err, b)
	}
	return out
}

// Same fails the test when the file name in the directory Regenerate
// returned differs from the committed file want.
func Same(t *testing.T, dir, name, want string) {
	t.Helper()
	got, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	committed, err := os.ReadFile(want)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, committed) {
		t.Errorf("%s is stale: run `make generate` and commit the result", want)
	}
}
