package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSecret(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "token")
	if err := os.WriteFile(file, []byte("  from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const env = "WARMPATH_CACHESERVER_TEST_SECRET"
	tests := []struct {
		name, path, env string
		setEnv          bool
		want, wantErr   string
	}{
		{name: "neither"},
		{name: "file", path: file, want: "from-file"},
		{name: "env", env: " from-env ", setEnv: true, want: "from-env"},
		{name: "both", path: file, env: "x", setEnv: true, wantErr: "both set"},
		{name: "missing file", path: filepath.Join(dir, "nope"), wantErr: "no such file"},
		{name: "empty file", path: empty, wantErr: "is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.setEnv {
				t.Setenv(env, tt.env)
			}
			got, err := secret(tt.path, env)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got %q, %v; want an error containing %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}
