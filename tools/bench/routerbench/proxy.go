package routerbench

import (
	"time"

	"github.com/warmpath/warmpath/tools/bench/proc"
)

// Proxy is a reverse proxy the benchmark started as a child process (nginx
// or the router) and measures through its URL.
type Proxy struct {
	// Name is "nginx" or "router".
	Name string
	// URL is the proxy's base URL, http://127.0.0.1:<port>.
	URL string
	// Version identifies what ran: nginx's own report ("nginx/1.22.1"), the
	// router binary's path, or "go build <package>" for a router built by
	// the run.
	Version string
	proc    *proc.Process
}

// Stop ends the proxy: SIGTERM, then SIGKILL to its process group after
// grace. It is safe to call more than once.
func (p *Proxy) Stop(grace time.Duration) error { return p.proc.Stop(grace) }

// Pid is the proxy process's id, for readings of its CPU and memory.
func (p *Proxy) Pid() int { return p.proc.Pid() }
