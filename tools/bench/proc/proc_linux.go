package proc

import "syscall"

// sysProcAttr puts a child in its own process group, so a terminal's
// Ctrl-C reaches only the benchmark (which then stops the child in order),
// and asks the kernel to SIGTERM the child if the benchmark dies first.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}
