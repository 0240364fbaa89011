package store

import (
	"encoding/binary"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// sparseObject writes a file for key whose header announces a value of n
// bytes that was never written: a sparse file of zeros, whose checksum is
// wrong. Indexing it must not read it: a 16 GiB body would take the
// restart minutes (a read, which checks the checksum, finds it corrupt).
func sparseObject(t *testing.T, dir, key string, n int64) {
	t.Helper()
	hdr := encodeObject(key, &Object{})
	hdr = hdr[:len(hdr)-4] // no crc: the value follows the header
	binary.LittleEndian.PutUint64(hdr[len(hdr)-8:], uint64(n))
	path := filepath.Join(dir, objectName(key))
	if err := os.WriteFile(path, hdr, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, int64(len(hdr))+n+4); err != nil {
		t.Fatal(err)
	}
}

// TestDiskLoadReadsHeadersOnly: the index is rebuilt from file names and
// headers; bodies are not read (a huge sparse object is indexed as its
// header says, and found corrupt only when read), and files whose header
// disagrees with their name or size are dropped.
func TestDiskLoadReadsHeadersOnly(t *testing.T) {
	dir := t.TempDir()
	d, err := OpenDisk(dir, 1<<40, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		if err := d.Put(fmt.Sprint("k", i), &Object{Value: make([]byte, 1000+i)}); err != nil {
			t.Fatal(err)
		}
	}
	const huge = 16 << 30
	sparseObject(t, dir, "huge", huge)
	// A file whose size disagrees with its header (a torn copy) and one
	// under another key's name are dropped at load.
	torn := filepath.Join(dir, objectName("k0"))
	if err := os.Truncate(torn, 100); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, objectName("k1")), filepath.Join(dir, objectName("elsewhere"))); err != nil {
		t.Fatal(err)
	}

	d, err = NewDisk(dir, 1<<40, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d.Contains("k2") {
		t.Fatal("an object was served before loading")
	}
	var read int64
	d.countRead = func(n int) { read += int64(n) }
	if err := d.Load(); err != nil {
		t.Fatal(err)
	}
	if read > 50*200 {
		t.Fatalf("loading 50 small objects and a 16 GiB one read %d bytes; want headers only", read)
	}
	tests := []struct {
		key  string
		want bool
	}{{"k0", false}, {"k1", false}, {"elsewhere", false}, {"k2", true}, {"k49", true}, {"huge", true}}
	for _, tt := range tests {
		if got := d.Contains(tt.key); got != tt.want {
			t.Errorf("after load, Contains(%s) = %v, want %v", tt.key, got, tt.want)
		}
	}
	if st := d.Stats(); st.Objects != 49 || st.Bytes < huge || st.Rejected != 2 {
		t.Fatalf("stats %+v: want 49 objects, >= %d bytes, 2 rejected", st, huge)
	}
}

// TestDiskChangesDuringLoad: a Put or Delete while the index loads wins
// over what the load finds on disk for that key.
func TestDiskChangesDuringLoad(t *testing.T) {
	dir := t.TempDir()
	d, _ := OpenDisk(dir, 1<<20, nil)
	for _, k := range []string{"deleted", "replaced", "kept"} {
		_ = d.Put(k, &Object{Value: []byte("old " + k)})
	}
	d, _ = NewDisk(dir, 1<<20, nil)
	d.Delete("deleted")
	_ = d.Put("replaced", &Object{Value: []byte("new")})
	if err := d.Load(); err != nil {
		t.Fatal(err)
	}
	if d.Contains("deleted") {
		t.Fatal("a key deleted during the load came back")
	}
	if got, ok := d.Get("replaced"); !ok || string(got.Value) != "new" {
		t.Fatalf("replaced during the load: %v %q", ok, got.Value)
	}
	if !d.Contains("kept") {
		t.Fatal("an untouched key was not loaded")
	}
}

// dirUsage is the space the directory's files take in whole 4 KiB blocks.
func dirUsage(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	err := filepath.WalkDir(dir, func(_ string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		n += blocks(info.Size())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestDiskStaysWithinCapacity: what the directory holds, in whole blocks
// and with the temporary file of the write in progress, never exceeds the
// capacity (an emptyDir sizeLimit set to it is not crossed).
func TestDiskStaysWithinCapacity(t *testing.T) {
	dir := t.TempDir()
	const capacity = 64 << 10
	d, _ := OpenDisk(dir, capacity, nil)
	worst := int64(0)
	d.beforeRename = func() { worst = max(worst, dirUsage(t, dir)) }
	tests := []struct {
		name string
		size int
	}{{"tiny", 10}, {"block", 4096}, {"odd", 5000}, {"large", 20 << 10}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for i := range 40 {
				if err := d.Put(fmt.Sprint(tt.name, i), &Object{Value: make([]byte, tt.size)}); err != nil {
					t.Fatal(err)
				}
				if used := dirUsage(t, dir); used > capacity || d.Stats().Bytes != used {
					t.Fatalf("after %d puts: directory uses %d bytes, accounted %d, capacity %d", i+1, used, d.Stats().Bytes, capacity)
				}
			}
		})
	}
	if worst > capacity {
		t.Fatalf("with a write in progress the directory used %d bytes, capacity %d", worst, capacity)
	}
}
