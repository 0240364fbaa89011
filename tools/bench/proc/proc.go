// Package proc runs the child processes of benchmarks and the demo: each in
// its own process group with its output in a log file, polled until ready,
// stopped with SIGTERM then SIGKILL, and killed by the kernel should the
// parent die first.
package proc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/warmpath/warmpath/libs/parentdeath"
)

// TailOf returns the last 2 KiB of the log file at path.
func TailOf(path string) string { return (&Process{logPath: path}).LogTail() }

// Process is a child process with stdout and stderr in a log file. Its
// exit is observed by one goroutine that closes exited.
type Process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	exited  chan struct{}
	waitErr error // set before exited is closed
}

// Name is the process's name in errors and its log file's base name.
func (p *Process) Name() string { return p.name }

// Pid is the process's id (benchmarks read its /proc entries).
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Exited is closed when the process has exited.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// Start starts argv in its own process group with output to
// dir/<name>.log. On Linux the child gets SIGTERM should the parent die
// without stopping it.
func Start(name, dir string, argv []string, env []string) (*Process, error) {
	logPath := filepath.Join(dir, name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("%s: create log: %w", name, err)
	}
	defer func() { _ = logf.Close() }() // the child keeps its own descriptor
	// The child outlives no context of ours: stop ends it explicitly, and
	// Pdeathsig covers the benchmark itself dying.
	cmd := exec.Command(argv[0], argv[1:]...) //nolint:noctx // lifetime managed by Process.Stop
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = sysProcAttr()
	parentdeath.Tie(cmd, syscall.SIGTERM)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: start %s: %w", name, argv[0], err)
	}
	p := &Process{name: name, cmd: cmd, logPath: logPath, exited: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// WaitReady polls url until it answers 200, the process exits, timeout
// passes or ctx ends.
func (p *Process) WaitReady(ctx context.Context, url string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	client := &http.Client{Timeout: time.Second}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		last = probe(ctx, client, url)
		if last == nil {
			return nil
		}
		select {
		case <-p.exited:
			exit := p.waitErr
			if exit == nil {
				exit = errors.New("exit status 0")
			}
			return fmt.Errorf("%s exited before it was ready (%w); log:\n%s", p.name, exit, p.LogTail())
		case <-ctx.Done():
			return fmt.Errorf("%s not ready at %s after %v (last: %w); log:\n%s", p.name, url, timeout, last, p.LogTail())
		case <-tick.C:
		}
	}
}

func probe(ctx context.Context, client *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

// Stop sends SIGTERM, waits up to grace, then kills the process group. An
// exit caused by the SIGTERM is not an error.
func (p *Process) Stop(grace time.Duration) error {
	select {
	case <-p.exited:
		return nil
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		return nil
	case <-time.After(grace):
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.exited
	return fmt.Errorf("%s: did not stop within %v after SIGTERM; killed", p.name, grace)
}

// LogTail returns the last 2 KiB of the process's log.
func (p *Process) LogTail() string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	if len(b) > 2048 {
		b = b[len(b)-2048:]
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	if s := strings.TrimSpace(string(b)); s != "" {
		return s
	}
	return "(empty)"
}
