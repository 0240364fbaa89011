// Command pause holds a pod's namespaces for the e2e node's containerd (its
// sandbox image), as upstream's build/pause/linux/pause.c does: it reaps
// the zombies it inherits and exits on SIGINT or SIGTERM. No registry is
// reachable here, so registry.k8s.io/pause cannot be pulled; this runs in a
// FROM-scratch image instead.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-v" {
		fmt.Println("pause (warmpath e2e)")
		return
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		reap()
	}
}

// reap collects every exited child without blocking.
func reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
