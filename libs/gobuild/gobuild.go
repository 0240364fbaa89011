// Package gobuild builds a main package with the go command, for the tests
// and benchmarks that run a warmpath binary as a process of its own.
package gobuild

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
)

// Build compiles the main package pkg into the file out. dir is where the
// go command runs ("" for the current directory): it decides the module or
// workspace pkg, an import path or a relative one such as ".", resolves
// in.
//
// The binary is static (no cgo), so it also runs in a FROM scratch image,
// and has trimmed paths and no VCS stamp, so the same source gives the
// same bytes and tests/harness can key its images on them.
func Build(ctx context.Context, dir, pkg, out string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=false", "-o", out, pkg)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", pkg, err, bytes.TrimSpace(b))
	}
	return nil
}
