package harness

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// buildTimeout bounds one `go build`; a cold build cache compiles the
// dependency tree once.
const buildTimeout = 5 * time.Minute

type buildResult struct {
	once sync.Once
	path string
	err  error
}

// builds maps a main package's import path to its *buildResult, so each
// package is built once per test process however many tests ask.
var builds sync.Map

// Binary builds the main package pkg (an import path in the workspace, e.g.
// "github.com/warmpath/warmpath/tools/cmd/vllm-sim") as a static binary and
// returns its path. The binary is named after the package's last element and
// shared by every test in the process; callers must not modify it.
//
// The build disables cgo, trims paths and omits VCS stamps, so the same
// source always gives the same bytes and Image can key on them.
func Binary(t testing.TB, pkg string) string {
	t.Helper()
	v, _ := builds.LoadOrStore(pkg, &buildResult{})
	r := v.(*buildResult)
	r.once.Do(func() { r.path, r.err = build(pkg) })
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r.path
}

func build(pkg string) (string, error) {
	root, err := Root()
	if err != nil {
		return "", err
	}
	dir, err := scratch()
	if err != nil {
		return "", fmt.Errorf("harness: %w", err)
	}
	out := filepath.Join(dir, path.Base(pkg))
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=false", "-o", out, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	var stderr bytes.Buffer
	cmd.Stdout = &stderr
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("harness: go build %s: %w\n%s", pkg, err, stderr.Bytes())
	}
	return out, nil
}
