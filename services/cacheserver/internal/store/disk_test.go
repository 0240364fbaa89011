package store

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/warmpath/warmpath/libs/lmproto"
	"github.com/warmpath/warmpath/libs/testwait"
)

func TestDiskRoundTripAndRestart(t *testing.T) {
	dir := t.TempDir()
	d, err := OpenDisk(dir, 1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	obj := &Object{Value: bytes.Repeat([]byte{7}, 5000), Meta: lmproto.Meta{Fmt: 1, Dtype: 3, Shape: [4]int32{2, 16, 8, 128}}}
	if err := d.Put("model@1@0@k@bfloat16", obj); err != nil {
		t.Fatal(err)
	}
	got, ok := d.Get("model@1@0@k@bfloat16")
	if !ok || !bytes.Equal(got.Value, obj.Value) || got.Meta != obj.Meta {
		t.Fatalf("round trip: %v %+v", ok, got)
	}
	// A restart rebuilds the index; leftovers of unfinished writes and
	// corrupt files are deleted.
	if err := os.WriteFile(filepath.Join(dir, ".tmp-deadbeef"), []byte("half"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, objectName("garbage")), []byte("WPK1 not an object"), 0o600); err != nil {
		t.Fatal(err)
	}
	d2, err := OpenDisk(dir, 1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := d2.Get("model@1@0@k@bfloat16"); !ok || !bytes.Equal(got.Value, obj.Value) {
		t.Fatal("object lost across a restart")
	}
	if d2.Contains("garbage") || d2.Stats().Rejected != 1 {
		t.Fatalf("corrupt file kept: %+v", d2.Stats())
	}
	if _, err := os.Stat(filepath.Join(dir, ".tmp-deadbeef")); !os.IsNotExist(err) {
		t.Fatal("partial write kept")
	}
}

func TestDiskCorruptionIsAMiss(t *testing.T) {
	dir := t.TempDir()
	d, _ := OpenDisk(dir, 1<<20, nil)
	_ = d.Put("k", &Object{Value: []byte("value bytes")})
	path := filepath.Join(dir, objectName("k"))
	b, _ := os.ReadFile(path)
	b[len(b)-6] ^= 0xff // flip a value byte
	_ = os.WriteFile(path, b, 0o600)
	if _, ok := d.Get("k"); ok {
		t.Fatal("a corrupt object was served")
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatal("the corrupt file was kept")
	}
}

func TestDiskCapacity(t *testing.T) {
	d, _ := OpenDisk(t.TempDir(), 100<<10, nil)
	for i := range 50 {
		_ = d.Put(fmt.Sprint(i), &Object{Value: make([]byte, 10<<10)})
	}
	st := d.Stats()
	if st.Bytes > 100<<10 || st.Evictions == 0 {
		t.Fatalf("%+v", st)
	}
	if !d.Contains("49") || d.Contains("0") {
		t.Fatal("not least recently used first")
	}
}

var tier0 *Tiered

// TestTieredWriteBehindAndPromotion: what memory evicts lands on disk and
// comes back (into memory) on the next read.
func TestTieredWriteBehindAndPromotion(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer func() {
		cancel()
		tier := tier0
		tier.Wait()
	}()
	mem := NewMemory(16*64<<10, Options{}) // 64 KiB per shard
	disk, _ := OpenDisk(t.TempDir(), 64<<20, nil)
	tier := NewTiered(ctx, mem, disk, 64<<20, nil) // a queue that drops nothing here
	tier0 = tier
	val := func(i int) []byte { return bytes.Repeat([]byte{byte(i)}, 20<<10) }
	drained := func() { // every queued object written, the one in progress too
		testwait.For(t, 5*time.Second, "the write-behind queue to drain", func() bool {
			return tier.written.Load() == tier.enqueued.Load()
		})
	}
	for i := range 200 {
		tier.Put(fmt.Sprint(i), &Object{Value: val(i)})
	}
	drained()
	if disk.Stats().Objects == 0 {
		t.Fatal("nothing was written behind")
	}
	for i := range 200 {
		got, ok := tier.Get(fmt.Sprint(i))
		if !ok || !bytes.Equal(got.Value, val(i)) {
			t.Fatalf("object %d lost between the tiers", i)
		}
		drained() // promotion evicts others; let them reach the disk
	}
	if disk.Stats().Hits == 0 {
		t.Fatal("no object came back from the disk tier")
	}
	// The last object read was promoted: it is now a memory hit.
	before := mem.Stats().Hits
	if _, ok := tier.Get("199"); !ok || mem.Stats().Hits != before+1 {
		t.Fatal("a promoted object is not served from memory")
	}
}

// TestCrashDuringWrites: a writer killed with SIGKILL mid-stream leaves a
// directory where every object reads back byte-exact or not at all.
func TestCrashDuringWrites(t *testing.T) {
	if os.Getenv("WARMPATH_DISK_CRASH_CHILD") != "" {
		crashChild(os.Getenv("WARMPATH_DISK_CRASH_CHILD"))
		return
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashDuringWrites$")
	cmd.Env = append(os.Environ(), "WARMPATH_DISK_CRASH_CHILD="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Kill the writer once it has stored some objects; it goes on writing,
	// so the kill lands mid-write.
	stored := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if sc.Text() == crashChildStored {
				stored <- true
				_, _ = io.Copy(io.Discard, out)
				return
			}
		}
		stored <- false
	}()
	select {
	case ok := <-stored:
		if !ok {
			_ = cmd.Wait()
			t.Fatal("the writer exited before storing anything")
		}
	case <-time.After(30 * time.Second):
		t.Error("the writer stored nothing within 30s")
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	d, err := OpenDisk(dir, 1<<30, nil)
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for i := range 100000 {
		key := "obj-" + strconv.Itoa(i)
		got, ok := d.Get(key)
		if !ok {
			continue
		}
		found++
		if !bytes.Equal(got.Value, crashValue(i)) {
			t.Fatalf("%s read back wrong after the crash", key)
		}
	}
	if found == 0 {
		t.Fatal("the writer stored nothing before it was killed")
	}
	t.Logf("%d objects intact after SIGKILL", found)
}

func crashValue(i int) []byte {
	r := rand.New(rand.NewPCG(uint64(i), 1))
	b := make([]byte, 64<<10+i%1000)
	for j := range b {
		b[j] = byte(r.Uint32())
	}
	return b
}

// crashChildStored is the line crashChild prints once it has stored objects.
const crashChildStored = "crash child: objects stored"

// crashChild writes objects as fast as it can until it is killed.
func crashChild(dir string) {
	d, err := OpenDisk(dir, 1<<30, nil)
	if err != nil {
		os.Exit(2)
	}
	for i := 0; ; i++ {
		_ = d.Put("obj-"+strconv.Itoa(i), &Object{Value: crashValue(i)})
		if i == 20 {
			fmt.Println(crashChildStored)
		}
	}
}
