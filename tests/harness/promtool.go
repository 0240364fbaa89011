package harness

import (
	"bytes"
	"errors"
	"os/exec"
	"strings"
	"testing"
)

// CheckMetrics pipes an exposition through `promtool check metrics`. A parse
// error fails the test. Lint findings fail it only for warmpath's own
// metrics: vllm: and lmcache: names mirror upstream exactly, colons and all.
func CheckMetrics(t *testing.T, exposition []byte) {
	t.Helper()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool not on PATH: `make tools` installs it")
	}
	cmd := exec.CommandContext(t.Context(), promtool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(exposition)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return
	case !errors.As(err, &exit):
		t.Fatalf("promtool: %v", err)
	case exit.ExitCode() != 3: // 3 means lint findings only
		t.Fatalf("promtool check metrics: %v\n%s", err, out)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		name, _, _ := strings.Cut(line, " ")
		if strings.HasPrefix(name, "vllm:") || strings.HasPrefix(name, "lmcache:") {
			if !strings.Contains(line, "should not contain ':'") {
				t.Logf("promtool (upstream name, kept as is): %s", line)
			}
			continue
		}
		t.Errorf("promtool: %s", line)
	}
}
