package main

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/warmpath/warmpath/libs/gobuild"
	"github.com/warmpath/warmpath/libs/parentdeath"
	"github.com/warmpath/warmpath/libs/testnet"
)

// TestSignals runs the real binary: SIGHUP rereads the routing file (the
// file watcher has nothing to see, as the file does not change), and
// SIGTERM ends the process cleanly.
func TestSignals(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "router")
	if err := gobuild.Build(t.Context(), "", ".", bin); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "routing.yaml")
	if err := os.WriteFile(cfg, []byte("strategy: roundrobin\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := testnet.FreeAddr(t)
	cmd := exec.Command(bin, "--listen", addr, "--workers", "http://127.0.0.1:1", "--config", cfg, "--log-level", "warn")
	cmd.Stderr = os.Stderr
	parentdeath.Tie(cmd, syscall.SIGKILL)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
	})

	reloads := func() float64 {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			return -1
		}
		defer resp.Body.Close()
		parser := expfmt.NewTextParser(model.UTF8Validation)
		families, err := parser.TextToMetricFamilies(resp.Body)
		if err != nil {
			t.Fatalf("parse /metrics: %v", err)
		}
		var n float64
		if f, ok := families["warmpath_router_config_reloads_total"]; ok {
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "result" && l.GetValue() == "success" {
						n += m.GetCounter().GetValue()
					}
				}
			}
		}
		return n
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitFor("the router to serve /metrics", func() bool { return reloads() == 0 })
	t.Log("serving")
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor("a reload after SIGHUP", func() bool { return reloads() == 1 })
	t.Log("reloaded")

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("router exited with %v after SIGTERM, want a clean exit", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("router still running 10s after SIGTERM")
	}
}
