package harness_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/warmpath/warmpath/tests/harness"
)

// envOrphanHelper makes TestStartProcessDiesWithTheTest the helper that
// starts a child and waits to be killed.
const envOrphanHelper = "WARMPATH_HARNESS_ORPHAN_HELPER"

// TestStartProcessDiesWithTheTest: a test binary killed outright (a CI
// timeout, `go test | head`) runs no cleanup, so a process StartProcess
// started must be ended by the kernel, not left holding its port and CPU
// for the next suite.
func TestStartProcessDiesWithTheTest(t *testing.T) {
	if os.Getenv(envOrphanHelper) != "" {
		p := harness.StartProcess(t.Context(), t, "sleep", "300")
		fmt.Printf("child %d\n", p.PID())
		select {} // until killed
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	helper := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestStartProcessDiesWithTheTest$", "-test.count=1")
	helper.Env = append(os.Environ(), envOrphanHelper+"=1")
	out, err := helper.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = helper.Process.Kill(); _ = helper.Wait() })
	pid := 0
	for sc := bufio.NewScanner(out); sc.Scan(); {
		if s, ok := strings.CutPrefix(sc.Text(), "child "); ok {
			if pid, err = strconv.Atoi(s); err != nil {
				t.Fatalf("helper said %q", sc.Text())
			}
			break
		}
	}
	if pid == 0 {
		t.Fatal("the helper started no child")
	}
	// Whatever happens below, the child goes.
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	if !alive(pid) {
		t.Fatalf("child %d was not running before its parent was killed", pid)
	}
	if err := helper.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = helper.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("child %d still runs 5s after the test binary that started it was killed", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// alive says pid runs: it exists and is not a zombie (a container's init
// may never reap the orphans it inherits).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if errors.Is(err, os.ErrNotExist) {
		return false
	}
	if err != nil {
		return true
	}
	// pid (comm) state ...: comm may hold spaces, so read after the last ')'.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z' && s[i+2] != 'X'
	}
	return true
}
