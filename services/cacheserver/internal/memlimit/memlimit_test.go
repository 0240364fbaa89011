package memlimit

import (
	"os"
	"path/filepath"
	"testing"
)

func TestChoose(t *testing.T) {
	const fallback = 100 << 20
	tests := []struct {
		name       string
		env        string
		flag       int64
		files      map[string]string
		want       int64
		wantSource string
		wantErr    bool
	}{
		{name: "GOMEMLIMIT wins", env: "1GiB", flag: 5, files: map[string]string{"memory.max": "1000"}, wantSource: "GOMEMLIMIT"},
		{name: "flag over cgroup", flag: 5 << 20, files: map[string]string{"memory.max": "1000000"}, want: 5 << 20, wantSource: "flag"},
		{name: "cgroup v2", files: map[string]string{"memory.max": "1000000\n"}, want: 900000, wantSource: "cgroup"},
		{name: "cgroup v2 unlimited", files: map[string]string{"memory.max": "max\n"}, want: fallback, wantSource: "capacity"},
		{name: "cgroup v1", files: map[string]string{"memory/memory.limit_in_bytes": "2000000"}, want: 1800000, wantSource: "cgroup"},
		{name: "cgroup v1 unlimited", files: map[string]string{"memory/memory.limit_in_bytes": "9223372036854771712"}, want: fallback, wantSource: "capacity"},
		{name: "no cgroup", want: fallback, wantSource: "capacity"},
		{name: "garbage", files: map[string]string{"memory.max": "lots"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			for p, v := range tt.files {
				path := filepath.Join(root, "sys/fs/cgroup", p)
				if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(v), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			env := func(string) (string, bool) { return tt.env, tt.env != "" }
			got, src, err := Choose(env, root, tt.flag, fallback)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("got %d from %s, want an error", got, src)
				}
				return
			}
			if err != nil || got != tt.want || src != tt.wantSource {
				t.Fatalf("got %d from %s (%v); want %d from %s", got, src, err, tt.want, tt.wantSource)
			}
		})
	}
}
