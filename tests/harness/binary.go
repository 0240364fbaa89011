package harness

import (
	"context"
	"fmt"
	"path"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/warmpath/warmpath/libs/gobuild"
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
// The build is gobuild.Build's: static, with the same bytes for the same
// source, so Image can key on them.
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
	if err := gobuild.Build(ctx, root, pkg, out); err != nil {
		return "", fmt.Errorf("harness: %w", err)
	}
	return out, nil
}
