package parentdeath_test

import (
	"os/exec"
	"syscall"
	"testing"

	"github.com/warmpath/warmpath/libs/parentdeath"
)

// TestTieKeepsTheAttributesSet: Tie adds the signal to what the caller set
// (a process group of its own) instead of replacing it. That the kernel
// then ends the child is tests/harness's TestStartProcessDiesWithTheTest.
func TestTieKeepsTheAttributesSet(t *testing.T) {
	for _, tt := range []struct {
		name string
		attr *syscall.SysProcAttr
		sig  syscall.Signal
	}{
		{"none set", nil, syscall.SIGKILL},
		{"own process group", &syscall.SysProcAttr{Setpgid: true}, syscall.SIGTERM},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command("true")
			cmd.SysProcAttr = tt.attr
			parentdeath.Tie(cmd, tt.sig)
			if cmd.SysProcAttr == nil || cmd.SysProcAttr.Pdeathsig != tt.sig {
				t.Fatalf("SysProcAttr = %+v, want Pdeathsig %v", cmd.SysProcAttr, tt.sig)
			}
			if tt.attr != nil && cmd.SysProcAttr.Setpgid != tt.attr.Setpgid {
				t.Errorf("Setpgid = %v, want it kept (%v)", cmd.SysProcAttr.Setpgid, tt.attr.Setpgid)
			}
		})
	}
}
