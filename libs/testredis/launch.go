package testredis

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/warmpath/warmpath/libs/parentdeath"
)

// proc is a running redis-server; done is closed once it has exited.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// kill ends the server (SIGKILL, by its PID) and waits for it to exit.
func (p *proc) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// errExited is a server that exited before it accepted a connection.
var errExited = errors.New("redis-server exited before accepting connections")

// launch starts redis-server with args and waits until addr accepts
// connections. A port chosen free can be taken by another test's process
// before the server binds it; the server then exits at once, and launch
// says so with the server's own output (errExited), so the caller can
// choose another port, rather than dialling it until a deadline. The
// server is not tied to the test's context: a node a test stopped must
// stay stopped; the caller kills it.
func launch(t testing.TB, bin string, args []string, addr string) (*proc, error) {
	t.Helper()
	log, err := os.CreateTemp(t.TempDir(), "redis-*.log")
	if err != nil {
		return nil, err
	}
	defer log.Close()
	cmd := exec.CommandContext(context.Background(), bin, args...) // killed by the caller, not with the test's context
	cmd.Stdout, cmd.Stderr = log, log
	parentdeath.Tie(cmd, syscall.SIGKILL) // and by the kernel, if the test binary dies first
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := ping(addr)
		if err == nil {
			return p, nil
		}
		select {
		case <-p.done:
			out, _ := os.ReadFile(log.Name())
			return nil, fmt.Errorf("%w on %s: %s", errExited, addr, lastLines(string(out), 3))
		default:
		}
		if time.Now().After(deadline) {
			p.kill()
			return nil, fmt.Errorf("redis-server on %s not reachable after 30s: %w", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// onFreePorts runs try, which starts a server on ports it chooses free,
// until it succeeds: a server that exited because another process took
// its ports before it bound them gets fresh ones, up to three tries. Any
// other failure, or a third exit, fails the test, naming what.
func onFreePorts(t testing.TB, what string, try func() error) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		err := try()
		if errors.Is(err, errExited) && attempt < 3 {
			t.Logf("testredis: %s: %v; other ports", what, err)
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return
	}
}

// lastLines are the last n lines of s, joined by " | ".
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// ping is nil once the server at addr answers PING: a connection alone
// could be another process's that took the port.
func ping(addr string) error {
	c, err := (&net.Dialer{Timeout: time.Second}).DialContext(context.Background(), "tcp", addr)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if strings.TrimSpace(line) != "+PONG" {
		return fmt.Errorf("%s answered PING with %q", addr, line)
	}
	return nil
}
