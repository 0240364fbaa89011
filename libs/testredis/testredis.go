// Package testredis starts a real redis-server (Debian's redis-server
// package; `make tools` installs it) on a free loopback port for tests.
package testredis

import (
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"testing"
	"time"
)

// Start runs redis-server with persistence off until the test ends and
// returns its redis:// URL.
func Start(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal("redis-server not on PATH: run `make tools` (Debian's redis-server package)")
	}
	// t.Context ends just before the test's cleanups run, which stops
	// the server with the test.
	ctx := t.Context()
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	cmd := exec.CommandContext(ctx, bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", t.TempDir(), "--maxmemory", "256mb", "--maxmemory-policy", "allkeys-lru")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	deadline := time.Now().Add(10 * time.Second)
	for {
		d := net.Dialer{Timeout: time.Second}
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			_ = c.Close()
			return "redis://" + addr + "/0"
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server on %s not reachable: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
