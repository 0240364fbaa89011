// Package harness runs warmpath binaries in containers for integration suites.
//
// A suite names a main package; the harness builds it as a static binary
// (CGO_ENABLED=0, -trimpath), packages it into a FROM-scratch image with the
// repository's build/Dockerfile, and starts a container that is ready once an
// HTTP health path answers 200. Images are tagged by the binary's SHA-256, so
// an unchanged binary is never rebuilt, across tests and across runs.
//
// Containers that must reach one another (a router and its workers) join a
// user-defined network from NewNetwork and find each other by Spec.Aliases.
//
// Nothing is pulled from a registry: the images have no base layer and the
// testcontainers reaper (Ryuk, itself an image) is disabled. Every container
// is terminated by t.Cleanup instead.
//
// Use it from a suite's TestMain:
//
//	func TestMain(m *testing.M) { harness.Main(m) }
package harness

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// Environment variables the harness reads.
const (
	// EnvRequireDocker, when "1", turns a missing Docker daemon into a test
	// failure instead of a skip. `make test-integration` sets it.
	EnvRequireDocker = "WARMPATH_REQUIRE_DOCKER"
	// envRyukDisabled is testcontainers' switch for its reaper container.
	envRyukDisabled = "TESTCONTAINERS_RYUK_DISABLED"
)

// LabelTest marks the images and containers the harness creates, so
// `make clean` can find and remove them.
const LabelTest = "io.warmpath.test"

var (
	scratchOnce sync.Once
	scratchDir  string
	scratchErr  error
)

// Main prepares the process for testcontainers, runs the tests and removes
// the binaries the harness built. Call it from TestMain.
func Main(m *testing.M) {
	// testcontainers reads its configuration once, on first use; set this
	// before any test runs. Ryuk would have to be pulled from Docker Hub.
	if os.Getenv(envRyukDisabled) == "" {
		_ = os.Setenv(envRyukDisabled, "true")
	}
	code := m.Run()
	if scratchDir != "" {
		_ = os.RemoveAll(scratchDir)
	}
	os.Exit(code)
}

// scratch returns a directory that lives as long as the test process, for
// binaries shared by several tests.
func scratch() (string, error) {
	scratchOnce.Do(func() {
		scratchDir, scratchErr = os.MkdirTemp("", "warmpath-harness-")
	})
	return scratchDir, scratchErr
}

// Root returns the workspace root: the nearest directory at or above the
// working directory that holds go.work.
func Root() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("harness: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, nil
		} else if !errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("harness: %w", err)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("harness: no go.work at or above the working directory")
		}
		dir = parent
	}
}
