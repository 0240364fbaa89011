package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/warmpath/warmpath/libs/gobuild"
	"github.com/warmpath/warmpath/libs/parentdeath"
)

// The tests in this file run the real binary over real sockets: what a
// hostile client reaches is the process, flags and listeners included.

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
	buildDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// serverBinary builds this command once per test binary.
func serverBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		if buildDir, buildErr = os.MkdirTemp("", "cacheserver-test-"); buildErr != nil {
			return
		}
		binPath = filepath.Join(buildDir, "cacheserver")
		buildErr = gobuild.Build(context.Background(), "", ".", binPath)
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// proc is a running cache server.
type proc struct {
	cmd             *exec.Cmd
	lm, resp, httpA string
	kvEvents        string // the KV event publisher's address; "" when off
	snapshot        string // --kv-events-snapshot-listen's address; "" when off
}

// startServer runs the binary with args (listeners on 127.0.0.1:0 unless
// args name them) and env added, and waits for its "serving" log line,
// which names the bound addresses.
func startServer(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	all := append([]string{"--lm-listen", "127.0.0.1:0", "--resp-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--log-format", "json", "--log-level", "info"}, args...)
	cmd := exec.Command(serverBinary(t), all...)
	cmd.Env = append(os.Environ(), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	parentdeath.Tie(cmd, syscall.SIGKILL)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	ready := make(chan *proc, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var rec struct {
				Msg, Lm, Resp, HTTP string
				KVEvents            string `json:"kv_events"`
				Snapshot            string `json:"kv_events_snapshot"`
			}
			if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Msg == "serving" {
				ready <- &proc{cmd: cmd, lm: rec.Lm, resp: rec.Resp, httpA: rec.HTTP, kvEvents: rec.KVEvents, snapshot: rec.Snapshot}
			}
			if testing.Verbose() {
				t.Logf("server: %s", sc.Text())
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	select {
	case p := <-ready:
		return p
	case <-exited:
		t.Fatal("cache server exited before serving")
	case <-time.After(30 * time.Second):
		t.Fatal("cache server did not log \"serving\" within 30 s")
	}
	return nil
}

// heapBytes is the process's live heap, from its own /metrics.
func (p *proc) heapBytes(t *testing.T) float64 {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+p.httpA+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_memstats_heap_alloc_bytes "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("go_memstats_heap_alloc_bytes %q: %v", v, err)
			}
			return f
		}
	}
	t.Fatal("no go_memstats_heap_alloc_bytes in /metrics")
	return 0
}

// rssBytes is the process's resident set, from /proc.
func (p *proc) rssBytes(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for l := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatalf("VmRSS %q: %v", v, err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS in /proc/<pid>/status")
	return 0
}

// heapStaysUnder polls the heap for window and fails the test the first
// time it reaches limit: the hostile bytes are read within milliseconds,
// so an allocation they cause shows up well inside the window.
func (p *proc) heapStaysUnder(t *testing.T, limit float64, window time.Duration) {
	t.Helper()
	for end := time.Now().Add(window); time.Now().Before(end); {
		if h := p.heapBytes(t); h >= limit {
			t.Fatalf("heap %.0f MiB, want under %.0f MiB", h/(1<<20), limit/(1<<20))
		}
		time.Sleep(50 * time.Millisecond) // poll interval, not synchronisation
	}
}
