// Package testredis starts real redis-server processes (Debian's
// redis-server package; `make tools` installs it) on free loopback ports
// for tests: one server (Start), or a Redis Cluster of several (StartCluster).
package testredis

import (
	"fmt"
	"os/exec"
	"strconv"
	"testing"

	"github.com/warmpath/warmpath/libs/testnet"
)

// Start runs redis-server with persistence off until the test ends and
// returns its redis:// URL.
func Start(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal("redis-server not on PATH: run `make tools` (Debian's redis-server package)")
	}
	var addr string
	var p *proc
	onFreePorts(t, "redis-server", func() (err error) {
		port := testnet.FreePort(t)
		addr = fmt.Sprintf("127.0.0.1:%d", port)
		p, err = launch(t, bin, []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
			"--dir", t.TempDir(), "--maxmemory", "256mb", "--maxmemory-policy", "allkeys-lru"}, addr)
		return err
	})
	t.Cleanup(p.kill)
	return "redis://" + addr + "/0"
}
