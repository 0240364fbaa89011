package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/warmpath/warmpath/libs/lmproto"
	"github.com/warmpath/warmpath/services/cacheserver/internal/testclock"
)

func TestMemoryExpiry(t *testing.T) {
	tests := []struct {
		name       string
		defaultTTL time.Duration
		expires    time.Duration // from now; 0: none given
		setExpires *time.Duration
		advance    time.Duration
		wantLive   bool
	}{
		{name: "no ttl lives on", advance: 1000 * time.Hour, wantLive: true},
		{name: "before expiry", expires: time.Minute, advance: 59 * time.Second, wantLive: true},
		{name: "at expiry", expires: time.Minute, advance: time.Minute},
		{name: "default ttl", defaultTTL: 10 * time.Second, advance: 10 * time.Second},
		{name: "default ttl before", defaultTTL: 10 * time.Second, advance: 9 * time.Second, wantLive: true},
		{name: "explicit beats default", defaultTTL: time.Second, expires: time.Hour, advance: time.Minute, wantLive: true},
		{name: "extended", expires: time.Second, setExpires: ptr(time.Hour), advance: time.Minute, wantLive: true},
		{name: "shortened", expires: time.Hour, setExpires: ptr(time.Second), advance: time.Minute},
		{name: "persisted", expires: time.Second, setExpires: ptr(time.Duration(0)), advance: time.Hour, wantLive: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := testclock.New()
			m := NewMemory(16<<20, Options{DefaultTTL: tt.defaultTTL, Now: clock.Now})
			o := &Object{Value: []byte("v")}
			if tt.expires > 0 {
				o.Expires = clock.In(tt.expires)
			}
			m.Put("k", o)
			if tt.setExpires != nil {
				at := int64(0)
				if *tt.setExpires != 0 {
					at = clock.In(*tt.setExpires)
				}
				if !m.SetExpires("k", at) {
					t.Fatal("SetExpires: key not found")
				}
			}
			clock.Advance(tt.advance)
			_, got := m.Get("k")
			if got != tt.wantLive || m.Contains("k") != tt.wantLive {
				t.Fatalf("live %v, want %v", got, tt.wantLive)
			}
			if _, ok := m.Expires("k"); ok != tt.wantLive {
				t.Fatalf("Expires found %v, want %v", ok, tt.wantLive)
			}
			st := m.Stats()
			wantExpired, wantObjects := uint64(1), int64(0)
			if tt.wantLive {
				wantExpired, wantObjects = 0, 1
			}
			if st.Expired != wantExpired || st.Objects != wantObjects {
				t.Fatalf("stats %+v, want expired %d objects %d", st, wantExpired, wantObjects)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func TestMemoryExpiredPutAndSetExpiresDelete(t *testing.T) {
	clock := testclock.New()
	m := NewMemory(16<<20, Options{Now: clock.Now})
	m.Put("k", &Object{Value: []byte("v")})
	if !m.Put("k", &Object{Value: []byte("v2"), Expires: clock.In(-time.Second)}) || m.Contains("k") {
		t.Fatal("an already-expired Put did not remove the key")
	}
	m.Put("k", &Object{Value: []byte("v")})
	if !m.SetExpires("k", clock.In(0)) || m.Contains("k") {
		t.Fatal("SetExpires at now did not delete the key")
	}
	if m.SetExpires("absent", clock.In(time.Hour)) {
		t.Fatal("SetExpires found an absent key")
	}
	// A reader holding the object sees no change when its expiry moves.
	o := &Object{Value: []byte("v"), Expires: clock.In(time.Hour)}
	m.Put("k", o)
	held, _ := m.Get("k")
	m.SetExpires("k", 0)
	if held.Expires != o.Expires {
		t.Fatal("SetExpires modified a stored object in place")
	}
}

// TestConcurrentExpiryChanges: readers, writers and expiry changes on the
// same keys (run with -race).
func TestConcurrentExpiryChanges(t *testing.T) {
	clock := testclock.New()
	m := NewMemory(1<<20, Options{Now: clock.Now})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 2000 {
				key := fmt.Sprint(i % 8)
				switch (g + i) % 4 {
				case 0:
					m.Put(key, &Object{Value: []byte("v"), Expires: clock.In(time.Second)})
				case 1:
					m.SetExpires(key, clock.In(time.Duration(i%3)*time.Second))
				case 2:
					if o, ok := m.Get(key); ok && len(o.Value) != 1 {
						t.Errorf("read %q", o.Value)
					}
				default:
					m.Expires(key)
					clock.Advance(time.Millisecond)
				}
			}
		})
	}
	wg.Wait()
	if st := m.Stats(); st.Objects < 0 || st.Bytes < 0 || st.Objects > 8 {
		t.Fatalf("stats %+v", st)
	}
}

// TestEvictionReclaimsExpired: eviction drops expired objects before live
// ones reach the disk tier, and never writes them behind.
func TestEvictionReclaimsExpired(t *testing.T) {
	clock := testclock.New()
	m := NewMemory(16<<20, Options{Now: clock.Now}) // 1 MiB per shard
	var mu sync.Mutex
	var behind []string
	m.Evicted = func(key string, _ *Object) {
		mu.Lock()
		behind = append(behind, key)
		mu.Unlock()
	}
	for i := range 400 {
		m.Put(fmt.Sprint("dead", i), &Object{Value: make([]byte, 32<<10), Expires: clock.In(time.Second)})
	}
	clock.Advance(time.Minute)
	mu.Lock()
	behind = nil // those written behind before they expired are fine
	mu.Unlock()
	for i := range 400 {
		m.Put(fmt.Sprint("live", i), &Object{Value: make([]byte, 32<<10)})
	}
	for _, k := range behind {
		if k[:4] == "dead" {
			t.Fatalf("expired %s was written behind", k)
		}
	}
	if st := m.Stats(); st.Expired == 0 {
		t.Fatalf("eviction reclaimed no expired object: %+v", st)
	}
}

func TestDiskExpirySurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	clock := testclock.New()
	d, err := OpenDisk(dir, 1<<20, clock.Now)
	if err != nil {
		t.Fatal(err)
	}
	short := &Object{Value: []byte("short"), Expires: clock.In(time.Minute)}
	long := &Object{Value: []byte("long"), Expires: clock.In(time.Hour)}
	for k, o := range map[string]*Object{"short": short, "long": long, "never": {Value: []byte("never")}} {
		if err := d.Put(k, o); err != nil {
			t.Fatal(err)
		}
	}
	d, err = OpenDisk(dir, 1<<20, clock.Now)
	if err != nil {
		t.Fatal(err)
	}
	if at, ok := d.Expires("short"); !ok || at != short.Expires {
		t.Fatalf("expiry after a restart: %d %v, want %d", at, ok, short.Expires)
	}
	clock.Advance(2 * time.Minute)
	d, err = OpenDisk(dir, 1<<20, clock.Now)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		key  string
		want bool
	}{{"short", false}, {"long", true}, {"never", true}}
	for _, tt := range tests {
		if _, ok := d.Get(tt.key); ok != tt.want {
			t.Errorf("%s: served %v, want %v", tt.key, ok, tt.want)
		}
	}
	if st := d.Stats(); st.Expired != 1 || st.Objects != 2 {
		t.Fatalf("stats %+v, want 1 expired, 2 objects", st)
	}
	if _, err := os.Stat(filepath.Join(dir, objectName("short"))); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("the expired object's file was kept")
	}
	// Expiring while open: a miss, and the file goes.
	clock.Advance(time.Hour)
	if d.Contains("long") {
		t.Fatal("expired object reported present")
	}
	if _, err := os.Stat(filepath.Join(dir, objectName("long"))); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("the expired object's file was kept")
	}
}

// encodeV1 writes the format used before expiries existed.
func encodeV1(key string, obj *Object) []byte {
	b := append([]byte(diskMagicV1), 0, 0)
	binary.LittleEndian.PutUint16(b[4:], uint16(len(key)))
	b = append(b, key...)
	m := obj.Meta
	for _, v := range []int32{m.Length, m.Fmt, m.Dtype, m.Location, m.Shape[0], m.Shape[1], m.Shape[2], m.Shape[3], 0} {
		b = binary.LittleEndian.AppendUint32(b, uint32(v))
	}
	b = binary.LittleEndian.AppendUint64(b, uint64(len(obj.Value)))
	b = append(b, obj.Value...)
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

var update = flag.Bool("update", false, "rewrite testdata/object-v2.bin")

// goldenObject is the object in testdata/object-v*.bin (v1 without the
// expiry).
var goldenObject = Object{Value: []byte("kv bytes"), Meta: lmproto.Meta{Length: 8, Fmt: 1, Dtype: 3, Location: 1, Shape: [4]int32{2, 16, 8, 128}}, Expires: 1_800_000_000_123_456_789}

// TestDiskFormatGolden pins the on-disk format: version 2 encodes byte for
// byte as committed, and the committed version-1 file (written before
// expiries existed) still decodes.
func TestDiskFormatGolden(t *testing.T) {
	v2 := encodeObject("golden-key", &goldenObject)
	if *update {
		if err := os.WriteFile(filepath.Join("testdata", "object-v2.bin"), v2, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(filepath.Join("testdata", "object-v2.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(v2, want) {
		t.Fatal("the version 2 encoding changed: a disk tier written by an older build would be unreadable (bump the version and keep reading this one)")
	}
	v1 := goldenObject
	v1.Expires = 0
	for _, tt := range []struct {
		file string
		want Object
	}{{"object-v1.bin", v1}, {"object-v2.bin", goldenObject}} {
		b, err := os.ReadFile(filepath.Join("testdata", tt.file))
		if err != nil {
			t.Fatal(err)
		}
		key, got, err := decodeObject(b)
		if err != nil || key != "golden-key" || !bytes.Equal(got.Value, tt.want.Value) || got.Meta != tt.want.Meta || got.Expires != tt.want.Expires {
			t.Errorf("%s: %q %+v %v, want %+v", tt.file, key, got, err, tt.want)
		}
	}
}

func TestDiskReadsVersion1(t *testing.T) {
	dir := t.TempDir()
	obj := &Object{Value: []byte("old format"), Meta: lmproto.Meta{Dtype: 3, Shape: [4]int32{1, 2, 3, 4}}}
	if err := os.WriteFile(filepath.Join(dir, objectName("old")), encodeV1("old", obj), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := OpenDisk(dir, 1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, ok := d.Get("old")
	if !ok || !bytes.Equal(got.Value, obj.Value) || got.Meta != obj.Meta || got.Expires != 0 {
		t.Fatalf("version 1 object: %v %+v", ok, got)
	}
}

func TestTieredExpiry(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	clock := testclock.New()
	mem := NewMemory(16<<20, Options{DefaultTTL: time.Hour, Now: clock.Now})
	disk, err := OpenDisk(t.TempDir(), 64<<20, clock.Now)
	if err != nil {
		t.Fatal(err)
	}
	tier := NewTiered(ctx, mem, disk, 0, nil)
	defer func() {
		cancel()
		tier.Wait()
	}()
	// Too big for a memory shard: straight to disk, with the default TTL.
	big := &Object{Value: make([]byte, 2<<20)}
	if !tier.Put("big", big) {
		t.Fatal("put refused")
	}
	if at, ok := tier.Expires("big"); !ok || at != clock.In(time.Hour) {
		t.Fatalf("disk-only object's expiry %d %v, want the default TTL", at, ok)
	}
	// Rewritten on disk with a new expiry.
	if !tier.SetExpires("big", clock.In(time.Minute)) {
		t.Fatal("SetExpires: key not found")
	}
	if at, _ := disk.Expires("big"); at != clock.In(time.Minute) {
		t.Fatalf("disk expiry %d, want %d", at, clock.In(time.Minute))
	}
	// A key in memory with a stale disk copy: the copy goes.
	small := &Object{Value: []byte("v")}
	tier.Put("small", small)
	if err := disk.Put("small", small); err != nil {
		t.Fatal(err)
	}
	tier.SetExpires("small", 0)
	if disk.Contains("small") {
		t.Fatal("a stale disk copy outlived a changed expiry")
	}
	// Replacing a key drops its disk copy, so the old object (and its
	// expiry) cannot come back; an already-expired replacement deletes it.
	if err := disk.Put("replaced", &Object{Value: []byte("old")}); err != nil {
		t.Fatal(err)
	}
	tier.Put("replaced", &Object{Value: []byte("new")})
	if disk.Contains("replaced") {
		t.Fatal("a replaced object's disk copy was kept")
	}
	if err := disk.Put("gone", &Object{Value: []byte("old")}); err != nil {
		t.Fatal(err)
	}
	tier.Put("gone", &Object{Value: []byte("new"), Expires: clock.In(-time.Second)})
	if tier.Contains("gone") {
		t.Fatal("an already-expired Put left the key readable")
	}
	clock.Advance(2 * time.Minute)
	if _, ok := tier.Get("big"); ok {
		t.Fatal("an expired disk object was served")
	}
	if _, ok := tier.Get("small"); !ok {
		t.Fatal("a persisted object expired")
	}
}

// FuzzDecodeObject: any bytes decode to an object or errCorrupt, never a
// panic; whatever decodes re-encodes (as version 2) to the same object.
func FuzzDecodeObject(f *testing.F) {
	obj := &Object{Value: []byte("value"), Meta: lmproto.Meta{Fmt: 1, Dtype: 3, Shape: [4]int32{2, 16, 8, 128}}, Expires: 1_800_000_000_000_000_000}
	f.Add(encodeObject("key", obj))
	f.Add(encodeV1("key", obj))
	for _, name := range []string{"object-v1.bin", "object-v2.bin"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add(encodeObject("", &Object{}))
	f.Add([]byte("WPK2"))
	f.Fuzz(func(t *testing.T, b []byte) {
		key, got, err := decodeObject(b)
		if err != nil {
			if !errors.Is(err, errCorrupt) {
				t.Fatalf("unexpected error kind: %v", err)
			}
			return
		}
		key2, again, err := decodeObject(encodeObject(key, got))
		if err != nil || key2 != key || !bytes.Equal(again.Value, got.Value) || again.Meta != got.Meta || again.Expires != got.Expires {
			t.Fatalf("round trip: %q %+v, want %q %+v (%v)", key2, again, key, got, err)
		}
	})
}
