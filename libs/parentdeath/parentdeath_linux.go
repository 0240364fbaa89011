package parentdeath

import (
	"os/exec"
	"syscall"
)

// Signal is the signal Tie has sent.
type Signal = syscall.Signal

func tie(cmd *exec.Cmd, sig Signal) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = sig
}
