package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/warmpath/warmpath/services/modelfetch/internal/s3test"
)

// The binary's wiring: flags, credentials from the environment as the
// operator passes them from a Secret, a real S3-compatible server.
func TestRun(t *testing.T) {
	srv := s3test.Start(t)
	srv.Put(t, "models", map[string][]byte{"llama/config.json": []byte(`{}`), "llama/w.safetensors": []byte("weights")})
	t.Setenv("AWS_ACCESS_KEY_ID", s3test.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", s3test.SecretKey)
	// Keep the SDK off any shared config or instance metadata of the host.
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")

	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"copies", []string{"--bucket", "models", "--prefix", "llama", "--endpoint-url", srv.URL, "--path-style", "--region", "us-west-2"}, ""},
		{"missing bucket flag", []string{"--prefix", "llama"}, "--bucket and --dest are required"},
		{"bad concurrency", []string{"--bucket", "models", "--concurrency", "0"}, "--concurrency 0"},
		{"nothing under the prefix", []string{"--bucket", "models", "--prefix", "mistral", "--endpoint-url", srv.URL, "--path-style", "--attempts", "1"}, "no objects under s3://models/mistral/"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dest := filepath.Join(t.TempDir(), "model")
			err := run(context.Background(), append(tt.args, "--dest", dest, "--log-format", "text"))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(filepath.Join(dest, "w.safetensors"))
			if err != nil || string(b) != "weights" {
				t.Fatalf("w.safetensors %q, %v", b, err)
			}
		})
	}
}
