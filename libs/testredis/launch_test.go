package testredis

import (
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestLaunchReportsATakenPort: a redis-server that cannot bind its port
// (another process took it after it was chosen free) is reported at once,
// with redis's own reason, so the caller can choose another port, instead
// of being waited for until a dial deadline.
func TestLaunchReportsATakenPort(t *testing.T) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal("redis-server not on PATH: run `make tools` (Debian's redis-server package)")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	began := time.Now()
	p, err := launch(t, bin, []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", t.TempDir()},
		"127.0.0.1:"+strconv.Itoa(port))
	if err == nil {
		p.kill()
		t.Fatal("redis-server started on a taken port")
	}
	if !strings.Contains(err.Error(), "in use") {
		t.Errorf("error %q does not carry redis's reason", err)
	}
	if d := time.Since(began); d > 5*time.Second {
		t.Errorf("the failure took %v to surface", d)
	}
}
