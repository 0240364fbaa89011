package s3copy_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/warmpath/warmpath/services/modelfetch/internal/s3copy"
	"github.com/warmpath/warmpath/services/modelfetch/internal/s3test"
)

// tree reads every regular file under dir (relative slash paths -> bytes),
// temporary files included, so a leftover would show.
func tree(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	got := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		got[filepath.ToSlash(rel)] = b
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func sameTree(t *testing.T, got, want map[string][]byte) {
	t.Helper()
	var keys []string
	for k := range got {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if len(got) != len(want) {
		t.Errorf("files %q, want %d files", keys, len(want))
	}
	for k, w := range want {
		if g, ok := got[k]; !ok || !bytes.Equal(g, w) {
			t.Errorf("file %s: %d bytes (present %v), want %d bytes", k, len(g), ok, len(w))
		}
	}
}

func body(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i%251)
	}
	return b
}

func fastOptions(bucket, prefix, dest string) s3copy.Options {
	return s3copy.Options{Bucket: bucket, Prefix: prefix, Dest: dest, Attempts: 3, Backoff: time.Millisecond, StallTimeout: 2 * time.Second, RequestTimeout: 5 * time.Second}
}

func TestCopyLayouts(t *testing.T) {
	srv := s3test.Start(t)
	srv.Put(t, "models", map[string][]byte{
		"llama/config.json":              []byte(`{"model_type":"llama"}`),
		"llama/model-00001.safetensors":  body(300_000, 1),
		"llama/tokenizer/tokenizer.json": body(5_000, 2),
		"llama/":                         nil, // a console folder marker
		"llama-old/config.json":          []byte(`{"old":true}`),
		"top.txt":                        []byte("top"),
		"deep/a/b/c/d.bin":               body(10, 3),
		"deep/a/b/c/e.bin":               body(0, 4),
	})
	tests := []struct {
		name, prefix string
		want         map[string][]byte
	}{
		{"prefix as a directory, sibling excluded", "llama", map[string][]byte{
			"config.json": []byte(`{"model_type":"llama"}`), "model-00001.safetensors": body(300_000, 1), "tokenizer/tokenizer.json": body(5_000, 2)}},
		{"prefix with its slash", "llama/", map[string][]byte{
			"config.json": []byte(`{"model_type":"llama"}`), "model-00001.safetensors": body(300_000, 1), "tokenizer/tokenizer.json": body(5_000, 2)}},
		{"nested prefix, empty object", "deep/a", map[string][]byte{"b/c/d.bin": body(10, 3), "b/c/e.bin": {}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dest := filepath.Join(t.TempDir(), "model")
			res, err := s3copy.Copy(context.Background(), srv.Client(3), fastOptions("models", tt.prefix, dest))
			if err != nil {
				t.Fatal(err)
			}
			sameTree(t, tree(t, dest), tt.want)
			var bytes int64
			for _, b := range tt.want {
				bytes += int64(len(b))
			}
			if res.Objects != len(tt.want) || res.Bytes != bytes || res.Skipped != 0 {
				t.Errorf("result %+v, want %d objects of %d bytes", res, len(tt.want), bytes)
			}
		})
	}
}

func TestCopyPaginates(t *testing.T) {
	srv := s3test.Start(t)
	want := map[string][]byte{}
	objs := map[string][]byte{}
	for i := range 25 {
		name := fmt.Sprintf("shard-%02d.bin", i)
		want[name] = body(100+i, byte(i))
		objs["m/"+name] = want[name]
	}
	srv.Put(t, "models", objs)
	dest := t.TempDir()
	o := fastOptions("models", "m", dest)
	o.PageSize = 7
	if _, err := s3copy.Copy(context.Background(), srv.Client(3), o); err != nil {
		t.Fatal(err)
	}
	sameTree(t, tree(t, dest), want)
}

// A second run (the init container restarted) fetches only what is missing
// or incomplete: complete files are kept, a wrong-sized one and a leftover
// temporary file are replaced.
func TestCopyResumes(t *testing.T) {
	srv := s3test.Start(t)
	want := map[string][]byte{"a.bin": body(1000, 1), "b.bin": body(2000, 2), "sub/c.bin": body(3000, 3)}
	objs := map[string][]byte{}
	for k, v := range want {
		objs["m/"+k] = v
	}
	srv.Put(t, "models", objs)
	dest := t.TempDir()
	if _, err := s3copy.Copy(context.Background(), srv.Client(3), fastOptions("models", "m", dest)); err != nil {
		t.Fatal(err)
	}
	// An interrupted earlier copy: b.bin cut short, a .part left behind.
	if err := os.WriteFile(filepath.Join(dest, "b.bin"), body(10, 9), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dest, "sub", ".c.bin.part"), body(10, 9), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dest, "sub", "c.bin")); err != nil {
		t.Fatal(err)
	}
	res, err := s3copy.Copy(context.Background(), srv.Client(3), fastOptions("models", "m", dest))
	if err != nil {
		t.Fatal(err)
	}
	sameTree(t, tree(t, dest), want)
	if res.Objects != 2 || res.Skipped != 1 || res.SkippedBytes != 1000 {
		t.Errorf("result %+v, want 2 fetched and a.bin (1000 bytes) kept", res)
	}
	for key, gets := range map[string]int{"m/a.bin": 1, "m/b.bin": 2, "m/sub/c.bin": 2} {
		if g := srv.Gets(key); g != gets {
			t.Errorf("%s fetched %d times, want %d", key, g, gets)
		}
	}
}

func TestCopyFaults(t *testing.T) {
	data := body(64_000, 7)
	tests := []struct {
		name    string
		faults  []s3test.Fault
		wantErr string // "" for success
		gets    int
	}{
		{"503 twice then served", []s3test.Fault{s3test.Unavailable, s3test.Unavailable}, "", 3},
		{"body cut once", []s3test.Fault{s3test.Cut}, "", 2},
		{"body stalls once", []s3test.Fault{s3test.Stall}, "", 2},
		{"cut on every attempt", []s3test.Fault{s3test.Cut, s3test.Cut, s3test.Cut}, "attempt 3 of 3", 3},
		{"stalled on every attempt", []s3test.Fault{s3test.Stall, s3test.Stall, s3test.Stall}, "no data for 300ms", 3},
		{"access denied is not retried", []s3test.Fault{s3test.Forbidden}, "AccessDenied", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := s3test.Start(t)
			srv.Put(t, "models", map[string][]byte{"m/w.bin": data})
			srv.Inject("m/w.bin", tt.faults...)
			dest := t.TempDir()
			o := fastOptions("models", "m", dest)
			o.StallTimeout = 300 * time.Millisecond
			// The SDK's own retryer retries the 503s too; one attempt
			// there leaves the count to Copy's.
			_, err := s3copy.Copy(context.Background(), srv.Client(1), o)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("copy: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), "s3://models/m/w.bin")):
				t.Fatalf("error %v, want one naming s3://models/m/w.bin and containing %q", err, tt.wantErr)
			}
			if g := srv.Gets("m/w.bin"); g != tt.gets {
				t.Errorf("%d GETs, want %d", g, tt.gets)
			}
			want := map[string][]byte{"w.bin": data}
			if tt.wantErr != "" {
				want = map[string][]byte{} // nothing half-written is left
			}
			sameTree(t, tree(t, dest), want)
		})
	}
}

func TestCopyRefusals(t *testing.T) {
	srv := s3test.Start(t)
	srv.Put(t, "models", map[string][]byte{"m/a.bin": body(10, 1)})
	tests := []struct {
		name, bucket, prefix, want string
	}{
		{"no objects under the prefix", "models", "nothing-here", "no objects under s3://models/nothing-here/"},
		{"missing bucket", "no-such-bucket", "m", "NoSuchBucket"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dest := filepath.Join(t.TempDir(), "d")
			_, err := s3copy.Copy(context.Background(), srv.Client(1), fastOptions(tt.bucket, tt.prefix, dest))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

// The server holds each GET until as many are in flight as the copy may
// run (or as remain), so the maximum it sees is the bound itself.
func TestCopyBoundsConcurrency(t *testing.T) {
	const n, conc = 12, 3
	srv := s3test.Start(t)
	objs := map[string][]byte{}
	for i := range n {
		objs[fmt.Sprintf("m/%02d.bin", i)] = body(1000, byte(i))
	}
	srv.Put(t, "models", objs)
	srv.Gate(func(inFlight, entered int) bool {
		// The tail: fewer GETs than the bound are left to come.
		return inFlight >= conc || inFlight+n-entered < conc
	})
	o := fastOptions("models", "m", t.TempDir())
	o.Concurrency = conc
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s3copy.Copy(ctx, srv.Client(1), o); err != nil {
		t.Fatal(err)
	}
	if m := srv.MaxInFlight(); m != conc {
		t.Errorf("at most %d GETs at once, want %d", m, conc)
	}
}
