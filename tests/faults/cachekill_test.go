package faults

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warmpath/warmpath/libs/lmproto"
	"github.com/warmpath/warmpath/tests/harness"
)

// TestCacheServerKilled SIGKILLs a cache server while a writer stores
// objects of known content over lm://, most of them evicted from its small
// memory tier into its disk tier on a bind-mounted directory, then starts
// the same container again on that directory. Every object read afterwards
// is byte-exact with its metadata, or a miss, never corrupt nor an error;
// the disk tier stays within its capacity (5%) after the restart.
func TestCacheServerKilled(t *testing.T) {
	const (
		memCap  = 4 << 20
		diskCap = 16 << 20
		// writeRate bounds the writer: about 6 MB/s of 64-192 KiB objects.
		writeRate = 50
	)
	dir := harness.WritableDir(t)
	cache := startCache(t, harness.Spec{
		Args: cacheArgs("--memory-capacity-bytes", itoa(memCap), "--disk-dir", "/data",
			"--disk-capacity-bytes", itoa(diskCap)),
		Mounts: map[string]string{dir: "/data"},
	})
	sc := &scenario{Fault: "docker kill -s KILL of a cache server (memory 4 MiB, disk tier 16 MiB on a bind mount) mid-writes over lm://, then docker start on the same directory",
		Rate: writeRate, Recovery: map[string]float64{}, Extra: map[string]float64{}}
	record(t, "cache_server_killed", sc)

	// The writer: object i, one after another, until the kill breaks its
	// connection.
	lm := lmproto.Dial(hostPort(t, cache, lmPort), 5*time.Second, 0)
	defer lm.Close()
	var written atomic.Int64 // objects 0..written-1 were sent (or being sent)
	stop := make(chan struct{})
	done := make(chan error, 1)
	t0 := time.Now()
	go func() {
		tick := time.NewTicker(time.Second / writeRate)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				done <- nil
				return
			case <-tick.C:
			}
			written.Store(int64(i + 1))
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := lm.Put(ctx, objKey(i), objMeta(i), objValue(i))
			cancel()
			if err != nil {
				done <- err
				return
			}
		}
	}()

	// Kill once the disk tier is full and evicting, mid-writes.
	deadline := time.Now().Add(90 * time.Second)
	for {
		ev, _, err := metric(t.Context(), cache.URL, "warmpath_cache_evictions_total", `tier="disk"`)
		if err == nil && ev >= 10 {
			break
		}
		if time.Now().After(deadline) {
			close(stop)
			t.Fatalf("disk tier not evicting after 90 s (%d objects written): %v", written.Load(), err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	killAt := time.Now()
	if err := cache.Kill(ctx); err != nil {
		close(stop)
		t.Fatal(err)
	}
	var werr error
	select {
	case werr = <-done:
	case <-time.After(10 * time.Second):
		close(stop)
		werr = <-done
	}
	n := int(written.Load())
	t.Logf("killed the cache server %.1fs into the writes, %d objects sent; the writer saw %v", killAt.Sub(t0).Seconds(), n, werr)
	sc.Duration = round(killAt.Sub(t0).Seconds())
	sc.Extra["objects_written"] = float64(n)

	restartAt := time.Now()
	u, err := cache.Restart(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	readyAt := waitPath(t, u, "/readyz", 60*time.Second)
	sc.Recovery["start_to_ready"] = round(readyAt.Sub(restartAt).Seconds())

	// Every object sent, and a few never sent: exact or a miss.
	rd := lmproto.Dial(hostPort(t, cache, lmPort), 10*time.Second, 0)
	defer rd.Close()
	var hits, misses, corrupt, errs int
	for i := range n + 5 {
		ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
		v, meta, err := rd.Get(ctx, objKey(i))
		cancel()
		switch {
		case errors.Is(err, lmproto.ErrMiss):
			misses++
		case err != nil:
			errs++
			t.Errorf("GET %s after the restart: %v", objKey(i), err)
		case i >= n:
			corrupt++
			t.Errorf("GET %s, never written, is a hit of %d bytes", objKey(i), len(v))
		default:
			want, wm := objValue(i), objMeta(i)
			wm.Length = int32(len(want))
			if !slices.Equal(v, want) || meta != wm {
				corrupt++
				t.Errorf("GET %s after the restart: %d bytes, meta %+v; want %d bytes, meta %+v, equal: %v",
					objKey(i), len(v), meta, len(want), wm, slices.Equal(v, want))
			} else {
				hits++
			}
		}
	}
	sc.Extra["reads_exact"], sc.Extra["reads_missed"] = float64(hits), float64(misses)
	sc.Extra["reads_corrupt"], sc.Extra["reads_failed"] = float64(corrupt), float64(errs)

	// The disk tier's capacity: what the server accounts and what the
	// directory holds, in 4 KiB blocks as the server counts them.
	stored, ok, err := metric(t.Context(), u, "warmpath_cache_stored_bytes", `tier="disk"`)
	if err != nil || !ok {
		t.Fatalf("warmpath_cache_stored_bytes{tier=\"disk\"}: %v (found %v)", err, ok)
	}
	onDisk, files := dirBytes(t, dir)
	sc.Extra["disk_stored_bytes"], sc.Extra["disk_dir_bytes"], sc.Extra["disk_objects"] = stored, float64(onDisk), float64(files)
	sc.Extra["disk_capacity_bytes"] = diskCap
	t.Logf("after the restart (ready in %.2fs): %d exact, %d misses, %d corrupt, %d errors of %d; disk tier %0.f bytes accounted, %d bytes in %d objects on disk (capacity %d)",
		sc.Recovery["start_to_ready"], hits, misses, corrupt, errs, n+5, stored, onDisk, files, diskCap)
	if stored > diskCap*1.05 || float64(onDisk) > diskCap*1.05 {
		t.Errorf("disk tier over its capacity %d after the restart: %.0f accounted, %d on disk", diskCap, stored, onDisk)
	}
	if hits == 0 {
		t.Errorf("no object survived the kill: want the disk tier's (%d files) to", files)
	}
}

// dirBytes is what a disk tier's directory holds, in 4 KiB blocks as the
// server counts them, and how many objects.
func dirBytes(t *testing.T, dir string) (bytes int64, objects int) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		fi, err := os.Stat(filepath.Join(dir, e.Name()))
		if err != nil {
			continue // removed since
		}
		if strings.HasSuffix(e.Name(), ".obj") {
			objects++
		}
		bytes += (fi.Size() + 4095) / 4096 * 4096
	}
	return bytes, objects
}

// waitPath polls base+path every 100ms until it answers 200 and returns
// when it did; it fails the test after limit.
func waitPath(t *testing.T, base, path string, limit time.Duration) time.Time {
	t.Helper()
	hc := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(limit)
	for {
		resp, err := hc.Get(base + path)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return time.Now()
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s%s not 200 after %v: %v", base, path, limit, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
