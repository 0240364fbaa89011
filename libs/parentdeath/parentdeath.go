// Package parentdeath ties a child process's life to the process that
// started it: a test binary or benchmark killed outright (a CI timeout, a
// SIGKILL, `go test | head`) runs none of its cleanup, and the servers it
// started would otherwise live on, holding their ports and CPU for the
// next suite.
package parentdeath

import (
	"os/exec"
	"syscall"
)

// Tie asks the kernel to send cmd's process sig when the thread that
// started it exits. Call it before cmd.Start. Go keeps its threads for the
// process's life unless a goroutine locked to one exits, so for a caller
// that does not start children from such a goroutine, that is when the
// whole process dies. On systems without the facility (anything but
// Linux), Tie does nothing.
func Tie(cmd *exec.Cmd, sig syscall.Signal) { tie(cmd, sig) }
