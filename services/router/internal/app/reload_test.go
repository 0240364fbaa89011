package app

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/warmpath/warmpath/services/router/internal/discovery"
	"github.com/warmpath/warmpath/services/router/internal/limiter"
)

// TestReloadKeepsLearntState: Reload (what SIGHUP calls) with an unchanged
// strategy section keeps the strategy instance, so what prefixaware learnt
// survives; a changed section builds a new one. No worker is needed: the
// app is built, not run.
func TestReloadKeepsLearntState(t *testing.T) {
	path := filepath.Join(t.TempDir(), "routing.yaml")
	if err := os.WriteFile(path, []byte("strategy: prefixaware\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	src, err := discovery.Static([]string{"http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(t.Context(), Options{Discovery: src, ConfigPath: path, Limits: limiter.Config{MaxQueue: 1024}})
	if err != nil {
		t.Fatal(err)
	}
	if got := a.Strategy(); got != "prefixaware" {
		t.Fatalf("strategy %q from the file, want prefixaware", got)
	}
	before := a.server.Routing().Strategy
	if err := a.Reload(); err != nil {
		t.Fatal(err)
	}
	if a.server.Routing().Strategy != before {
		t.Error("reload of an unchanged file replaced the strategy (and lost what it learnt)")
	}
	if err := os.WriteFile(path, []byte("strategy: prefixaware\nrequestLimits:\n  maxConcurrentRequests: 3\n  maxQueueSize: 4\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := a.Reload(); err != nil {
		t.Fatal(err)
	}
	if a.server.Routing().Strategy != before {
		t.Error("changing only requestLimits replaced the strategy")
	}
	if got := a.limiter.Config(); got.MaxConcurrent != 3 || got.MaxQueue != 4 {
		t.Errorf("limits after reload = %+v, want 3 and 4", got)
	}
	if err := os.WriteFile(path, []byte("strategy: bogus\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := a.Reload(); err == nil {
		t.Error("a broken file reloaded without an error")
	}
	if a.server.Routing().Strategy != before {
		t.Error("a broken file replaced the running strategy")
	}
	if err := os.WriteFile(path, []byte("strategy: prefixaware\nloadGuard:\n  window: 3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := a.Reload(); err != nil {
		t.Fatal(err)
	}
	if a.server.Routing().Strategy == before {
		t.Error("a changed strategy section kept the old strategy")
	}
}
