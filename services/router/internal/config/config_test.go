package config

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"log/slog"

	"github.com/warmpath/warmpath/libs/testwait"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		wantErr string
		check   func(t *testing.T, f File)
	}{
		{name: "empty is defaults", in: ``, check: func(t *testing.T, f File) {
			if f.Name != "prefixaware" || f.RequestLimits != nil {
				t.Fatalf("got %+v", f)
			}
		}},
		{name: "yaml", in: "strategy: session\nsession:\n  headers: [x-tenant]\nrequestLimits:\n  maxConcurrentRequests: 8\n  maxQueueSize: 16\n  overflowStatusCode: 503\n  queueTimeout: 2s\n",
			check: func(t *testing.T, f File) {
				lc, err := f.RequestLimits.Limiter()
				if err != nil || f.Name != "session" || lc.MaxConcurrent != 8 || lc.MaxQueue != 16 || lc.OverflowStatus != 503 || lc.QueueTimeout != 2*time.Second {
					t.Fatalf("got %+v %+v %v", f, lc, err)
				}
				if h := f.Session.KeyHeaders(); len(h) != 1 || h[0] != "x-tenant" {
					t.Fatalf("headers %v", h)
				}
			}},
		{name: "json", in: `{"strategy":"roundrobin"}`, check: func(t *testing.T, f File) {
			if f.Name != "roundrobin" {
				t.Fatalf("got %q", f.Name)
			}
		}},
		{name: "unknown field", in: "strategy: roundrobin\nstratgy: x\n", wantErr: "stratgy"},
		{name: "unknown strategy", in: "strategy: fastest\n", wantErr: "fastest"},
		{name: "bad overflow code", in: "requestLimits:\n  overflowStatusCode: 418\n", wantErr: "overflowStatusCode"},
		{name: "bad queue timeout", in: "requestLimits:\n  queueTimeout: soon\n", wantErr: "queueTimeout"},
		{name: "negative limit", in: "requestLimits:\n  maxQueueSize: -1\n", wantErr: "non-negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := Parse([]byte(tt.in))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one mentioning %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, f)
		})
	}
}

func TestWatchSeesRenameIntoPlace(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "routing.yaml")
	if err := os.WriteFile(path, []byte("strategy: roundrobin\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var calls atomic.Int32
	started := make(chan struct{})
	watching = func() { close(started) }
	defer func() { watching = nil }()
	done := make(chan error, 1)
	go func() { done <- Watch(ctx, path, slog.New(slog.DiscardHandler), func() { calls.Add(1) }) }()
	select {
	case <-started:
	case err := <-done:
		t.Fatalf("Watch returned before watching: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("the watcher did not start within 5s")
	}
	tmp := filepath.Join(dir, ".tmp")
	if err := os.WriteFile(tmp, []byte("strategy: session\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 5*time.Second, "the change to be reported", func() bool { return calls.Load() > 0 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
