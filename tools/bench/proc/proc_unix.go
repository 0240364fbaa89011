//go:build unix

package proc

import "syscall"

// sysProcAttr puts a child in its own process group, so a terminal's
// Ctrl-C reaches only the benchmark, which then stops the child in order.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
