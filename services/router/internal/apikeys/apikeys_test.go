package apikeys

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestKeysRotateWithoutRestart: the keys of a file (a mounted Secret) are
// each accepted, and a rewrite of the file takes effect at the next check;
// a rewrite that leaves no key, or a file that vanished, keeps the keys in
// force rather than locking every client out.
func TestKeysRotateWithoutRestart(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "keys")
	write := func(s string) {
		t.Helper()
		// As the kubelet updates a Secret volume: a new file swapped in.
		tmp := filepath.Join(dir, "new")
		if err := os.WriteFile(tmp, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, file); err != nil {
			t.Fatal(err)
		}
	}
	write("# tenants\nkey-a\n\n  key-b  \n")
	s, err := New("static-key", file, time.Nanosecond, nil)
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name    string
		rewrite func()
		valid   []string
		invalid []string
	}{
		{"at start", nil, []string{"key-a", "key-b", "static-key"}, []string{"", "key-c", "# tenants", "key-a ", "key"}},
		{"rotated", func() { write("key-b\nkey-c\n") }, []string{"key-b", "key-c", "static-key"}, []string{"key-a"}},
		{"emptied", func() { write("# nothing\n") }, []string{"key-b", "key-c"}, []string{"key-a"}},
		{"removed", func() { _ = os.Remove(file) }, []string{"key-b", "key-c"}, []string{"key-a"}},
		{"back", func() { write("key-d") }, []string{"key-d"}, []string{"key-b", "key-c"}},
	}
	for _, st := range steps {
		if st.rewrite != nil {
			st.rewrite()
		}
		for _, k := range st.valid {
			if !s.Valid([]byte(k)) {
				t.Errorf("%s: %q refused", st.name, k)
			}
		}
		for _, k := range st.invalid {
			if s.Valid([]byte(k)) {
				t.Errorf("%s: %q accepted", st.name, k)
			}
		}
	}
}

func TestNew(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("\n# none\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, static, file string
		enabled, fails     bool
	}{
		{"neither: open", "", "", false, false},
		{"a static key", "k", "", true, false},
		{"a missing file", "", filepath.Join(dir, "nope"), false, true},
		{"a file with no key", "", empty, false, true},
	}
	for _, tt := range tests {
		s, err := New(tt.static, tt.file, 0, nil)
		if (err != nil) != tt.fails {
			t.Errorf("%s: error %v, want failure %v", tt.name, err, tt.fails)
			continue
		}
		if err == nil && s.Enabled() != tt.enabled {
			t.Errorf("%s: enabled %v, want %v", tt.name, s.Enabled(), tt.enabled)
		}
	}
}
