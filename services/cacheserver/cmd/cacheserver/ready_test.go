package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/warmpath/warmpath/libs/lmproto"
	"github.com/warmpath/warmpath/libs/testnet"
	"github.com/warmpath/warmpath/services/cacheserver/internal/store"
)

// readyz polls /readyz until it answers and returns its status.
func readyz(t *testing.T, addr string, until func(int) bool) int {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err == nil {
			_ = resp.Body.Close()
			if until(resp.StatusCode) {
				return resp.StatusCode
			}
		}
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("/readyz: no wanted answer in 10s (last err %v)", err)
		}
	}
}

// TestListensWhileDiskLoads: with a disk tier whose index cannot finish
// loading (one object file is a FIFO nobody writes, so reading its header
// blocks), the server already accepts lm:// requests and /readyz says 503;
// once the load finishes, 200 and the disk's objects are served.
func TestListensWhileDiskLoads(t *testing.T) {
	dir := t.TempDir()
	d, err := store.OpenDisk(dir, 1<<30, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		if err := d.Put(fmt.Sprint("k", i), &store.Object{Value: make([]byte, 10<<10)}); err != nil {
			t.Fatal(err)
		}
	}
	fifo := filepath.Join(dir, "stuck.obj")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	lm, respAddr, httpAddr := testnet.FreeAddr(t), testnet.FreeAddr(t), testnet.FreeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--lm-listen", lm, "--resp-listen", respAddr, "--http-listen", httpAddr,
			"--disk-dir", dir, "--log-level", "error"})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()

	if got := readyz(t, httpAddr, func(int) bool { return true }); got != http.StatusServiceUnavailable {
		t.Fatalf("/readyz while loading: %d, want 503", got)
	}
	c := lmproto.Dial(lm, 2*time.Second, 0)
	defer c.Close()
	if err := c.Health(ctx); err != nil {
		t.Fatalf("lm:// while loading: %v", err)
	}

	w, err := os.OpenFile(fifo, os.O_WRONLY, 0) // unblocks the load: EOF, a corrupt file
	if err != nil {
		t.Fatal(err)
	}
	_ = w.Close()
	readyz(t, httpAddr, func(code int) bool { return code == http.StatusOK })
	if _, _, err := c.Get(ctx, "k199"); err != nil {
		t.Fatalf("a disk object after the load: %v", err)
	}
}
