package harness

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"github.com/warmpath/warmpath/libs/parentdeath"
)

// Process is a process StartProcess started, for suites that stop it
// themselves: a worker killed mid-test, a router sent SIGTERM to check its
// shutdown.
type Process struct {
	cmd  *exec.Cmd
	logs *lockedBuffer
	done chan struct{}
	err  error // cmd.Wait's, once done is closed
}

// StartProcess runs bin with args until the test ends (or ctx does), and
// writes its output into the test log if the test failed.
func StartProcess(ctx context.Context, t testing.TB, bin string, args ...string) *Process {
	t.Helper()
	cmd := exec.CommandContext(ctx, bin, args...)
	logs := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	// A test binary killed outright runs no cleanup: the kernel ends the
	// process then.
	parentdeath.Tie(cmd, syscall.SIGKILL)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	p := &Process{cmd: cmd, logs: logs, done: make(chan struct{})}
	// One goroutine waits, so Kill, Wait and the cleanup may each be
	// called in any order and any number of times.
	go func() { p.err = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.Kill()
		if out := logs.String(); t.Failed() && out != "" {
			t.Logf("%s output:\n%.4000s", filepath.Base(bin), out)
		}
	})
	return p
}

// PID is the process's ID.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Output is what the process wrote so far, stdout and stderr interleaved:
// for suites that check its log lines.
func (p *Process) Output() string { return p.logs.String() }

// Done is closed once the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Signal sends sig to the process (an error once it has exited).
func (p *Process) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// Wait waits for the process to exit and returns how it did (nil: status 0).
func (p *Process) Wait() error {
	<-p.done
	return p.err
}

// Kill ends the process at once and waits for it.
func (p *Process) Kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

// lockedBuffer is a bytes.Buffer the process' output may be written to
// while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
