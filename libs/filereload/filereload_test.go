package filereload

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestReloadKeepsLastGood: a change is parsed at the next check; a file
// gone or a content that fails to parse keeps the last good value; an
// unchanged file is not parsed again.
func TestReloadKeepsLastGood(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	write := func(path, s string) {
		t.Helper()
		if err := os.WriteFile(path+".new", []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(path+".new", path); err != nil {
			t.Fatal(err)
		}
	}
	parses := 0
	parse := func(c [][]byte) (string, error) {
		parses++
		s := string(c[0]) + "+" + string(c[1])
		if strings.Contains(s, "bad") {
			return "", errors.New("bad content")
		}
		return s, nil
	}
	write(a, "1")
	write(b, "x")
	v, err := New(time.Nanosecond, nil, parse, a, b)
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name   string
		change func()
		want   string
		parses int
	}{
		{"at start", func() {}, "1+x", 1},
		{"unchanged", func() {}, "1+x", 1},
		{"one file changed", func() { write(b, "y") }, "1+y", 2},
		{"bad content", func() { write(a, "bad") }, "1+y", 3},
		{"a file gone", func() { _ = os.Remove(a) }, "1+y", 3},
		{"whole again", func() { write(a, "2") }, "2+y", 4},
	}
	for _, st := range steps {
		st.change()
		if got := v.Get(); got != st.want || parses != st.parses {
			t.Errorf("%s: %q after %d parses, want %q after %d", st.name, got, parses, st.want, st.parses)
		}
	}
	if _, err := New(0, nil, parse, filepath.Join(dir, "missing")); err == nil {
		t.Error("New accepted a missing file")
	}
}
