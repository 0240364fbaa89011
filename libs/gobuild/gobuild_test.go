package gobuild_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/warmpath/warmpath/libs/gobuild"
)

func TestBuildRunsTheProgram(t *testing.T) {
	dir := t.TempDir()
	src := "module example.com/hello\n\ngo 1.26\n"
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	main := "package main\n\nfunc main() { println(\"hello\") }\n"
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(main), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GOWORK", "off") // the scratch module is not in the workspace
	bin := filepath.Join(t.TempDir(), "hello")
	if err := gobuild.Build(t.Context(), dir, ".", bin); err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(t.Context(), bin).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "hello" {
		t.Fatalf("built binary said %q, %v; want hello", out, err)
	}
}

func TestBuildErrorCarriesCompilerOutput(t *testing.T) {
	err := gobuild.Build(t.Context(), "", "example.com/does/not/exist", filepath.Join(t.TempDir(), "x"))
	if err == nil || !strings.Contains(err.Error(), "go build example.com/does/not/exist") {
		t.Fatalf("err = %v, want one naming the package", err)
	}
}
