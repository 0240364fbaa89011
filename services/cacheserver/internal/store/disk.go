package store

import (
	"bytes"
	"container/list"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/warmpath/warmpath/libs/lmproto"
)

// Disk is the disk tier: one file per object in a directory, bounded in
// bytes, least recently used evicted. Each file is checksummed and written
// to a temporary name then renamed, so a reader (or a restart after kill
// -9) sees a whole object or none; a file that fails its checksum is
// deleted and counted as a miss. An object past its expiry is a miss,
// deleted when a read finds it or when the tier is opened.
type Disk struct {
	dir      string
	capacity int64
	clock    func() time.Time

	mu    sync.Mutex
	items map[string]*list.Element // key -> *diskEntry
	lru   *list.List               // front: most recent
	bytes int64

	// reserved is the space of temporary files being written: made room
	// for before they are, so the directory never holds more than
	// capacity even mid-write.
	reserved int64
	// touched records the files (names) of keys written or deleted while
	// Load runs (nil after): Load leaves those as they are.
	touched map[string]struct{}
	// tmpPrefix names this process's temporary files, so Load deletes
	// only those an earlier process left, not writes running beside it.
	tmpPrefix string

	hits, misses, evictions, corrupt, writeErrors, expired atomic.Uint64

	// observe is Observe's hook, called with mu held.
	observe Observer

	// Test hooks: countRead sees the bytes Load reads; beforeRename runs
	// once a temporary file is written.
	countRead    func(int)
	beforeRename func()
}

type diskEntry struct {
	key     string
	size    int64
	expires int64 // Unix nanoseconds, 0: never; kept here so Contains needs no read
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// File layout, version 2: magic "WPK2", key length (u16), key, meta
// (9 x int32), expiry (i64, Unix nanoseconds, 0: never), value length
// (u64), value, crc32c of everything before it. Version 1 ("WPK1") is the
// same without the expiry; it is still read (as never expiring), so a
// directory written before expiries existed survives an upgrade.
const (
	diskMagicV1 = "WPK1"
	diskMagic   = "WPK2"
)

// MaxKeyBytes is the longest key the disk tier can store: the file format
// gives a key's length 16 bits. The protocols refuse longer keys when they
// are stored, whether or not a disk tier is configured, so a key's fate
// does not depend on whether it is evicted to disk.
const MaxKeyBytes = 1<<16 - 1

// OpenDisk opens (creating) dir as a disk tier of capacity bytes and
// loads its index (NewDisk, then Load).
func OpenDisk(dir string, capacity int64, now func() time.Time) (*Disk, error) {
	d, err := NewDisk(dir, capacity, now)
	if err != nil {
		return nil, err
	}
	return d, d.Load()
}

// NewDisk opens (creating) dir as a disk tier of capacity bytes with an
// empty index: it serves what is written from now on at once, and the
// objects already in dir once Load has indexed them. A server listens (and
// reports not ready) while Load runs, so a large tier is no crash loop.
// now is the clock expiries are measured against (time.Now when nil).
func NewDisk(dir string, capacity int64, now func() time.Time) (*Disk, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("disk tier: %w", err)
	}
	if now == nil {
		now = time.Now
	}
	var session [4]byte
	_, _ = rand.Read(session[:])
	return &Disk{dir: dir, capacity: capacity, clock: now, items: map[string]*list.Element{}, lru: list.New(),
		touched: map[string]struct{}{}, tmpPrefix: ".tmp-" + hex.EncodeToString(session[:]) + "-"}, nil
}

// Load indexes the objects already in the directory from their names and
// headers; bodies are not read (a body's checksum is verified when it is
// read). Partial writes (temporary files), files whose header disagrees
// with their name or size, and expired objects are deleted. Objects are
// ranked oldest first by modification time, so the LRU order survives a
// restart approximately. A key written or deleted while Load runs keeps
// that change. Call it once.
func (d *Disk) Load() error {
	entries, err := os.ReadDir(d.dir)
	if err != nil {
		return fmt.Errorf("disk tier: load %s: %w", d.dir, err)
	}
	type found struct {
		key            string
		size           int64
		mtime, expires int64
	}
	var objs []found
	for _, e := range entries {
		path := filepath.Join(d.dir, e.Name())
		switch {
		case strings.HasPrefix(e.Name(), ".tmp-") && !strings.HasPrefix(e.Name(), d.tmpPrefix):
			_ = os.Remove(path) // a write that never finished, before this process
		case strings.HasSuffix(e.Name(), ".obj"):
			key, expires, size, mtime, err := d.readHeader(path)
			if err != nil || objectName(key) != e.Name() {
				d.corrupt.Add(1)
				d.removeUntouched(e.Name())
				continue
			}
			if expires != 0 && d.now() >= expires {
				d.expired.Add(1)
				d.removeUntouched(e.Name())
				continue
			}
			objs = append(objs, found{key, size, mtime, expires})
		}
	}
	// Newest first, each behind what was written during the load.
	sort.Slice(objs, func(i, j int) bool { return objs[i].mtime > objs[j].mtime })
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, o := range objs {
		if _, ok := d.touched[objectName(o.key)]; ok {
			continue // written or deleted since: that change stands
		}
		d.items[o.key] = d.lru.PushBack(&diskEntry{key: o.key, size: blocks(o.size), expires: o.expires})
		d.bytes += blocks(o.size)
		d.notifyLocked(o.key)
	}
	d.touched = nil
	d.evictLocked(0)
	return nil
}

// removeUntouched deletes the file name found bad by Load, unless a write
// or delete since has made it another file.
func (d *Disk) removeUntouched(name string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.touched[name]; !ok {
		_ = os.Remove(filepath.Join(d.dir, name))
	}
}

// readHeader reads one file's header: its key and expiry, and checks that
// the file's size is what the header announces. It reads at most the
// header's bytes, whatever the body's size.
func (d *Disk) readHeader(path string) (key string, expires, size, mtime int64, err error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, 0, 0, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return "", 0, 0, 0, err
	}
	var r io.Reader = f
	if d.countRead != nil {
		r = countingReader{f, d.countRead}
	}
	var fixed [6]byte
	if _, err := io.ReadFull(r, fixed[:]); err != nil {
		return "", 0, 0, 0, errCorrupt
	}
	expiryLen := 0
	switch string(fixed[:4]) {
	case diskMagic:
		expiryLen = 8
	case diskMagicV1:
	default:
		return "", 0, 0, 0, errCorrupt
	}
	kl := int(binary.LittleEndian.Uint16(fixed[4:]))
	rest := make([]byte, kl+36+expiryLen+8)
	if _, err := io.ReadFull(r, rest); err != nil {
		return "", 0, 0, 0, errCorrupt
	}
	if expiryLen > 0 {
		expires = int64(binary.LittleEndian.Uint64(rest[kl+36:]))
	}
	n := binary.LittleEndian.Uint64(rest[len(rest)-8:])
	if want := uint64(6+len(rest)) + n + 4; n > uint64(info.Size()) || want != uint64(info.Size()) {
		return "", 0, 0, 0, errCorrupt
	}
	return string(rest[:kl]), expires, info.Size(), info.ModTime().UnixNano(), nil
}

// countingReader reports the bytes read through it (tests check that
// loading reads headers only).
type countingReader struct {
	r     io.Reader
	count func(int)
}

func (c countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.count(n)
	return n, err
}

// blockSize is the unit file systems allocate in (ext4, xfs, tmpfs): a file
// takes its size rounded up to it, which is what the capacity accounts.
const blockSize = 4096

func blocks(n int64) int64 { return (n + blockSize - 1) / blockSize * blockSize }

func (d *Disk) now() int64 { return d.clock().UnixNano() }

func objectName(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:]) + ".obj"
}

func encodeObject(key string, obj *Object) []byte {
	b := append(encodeHeader(key, obj), obj.Value...)
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// encodeHeader is a file's bytes before the value. Put writes it, the
// value and the checksum in turn, so a value is never copied to be written.
func encodeHeader(key string, obj *Object) []byte {
	b := make([]byte, 0, 4+2+len(key)+36+8+8)
	b = append(b, diskMagic...)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(key)))
	b = append(b, key...)
	m := obj.Meta
	for _, v := range []int32{m.Length, m.Fmt, m.Dtype, m.Location, m.Shape[0], m.Shape[1], m.Shape[2], m.Shape[3], 0} {
		b = binary.LittleEndian.AppendUint32(b, uint32(v))
	}
	b = binary.LittleEndian.AppendUint64(b, uint64(obj.Expires))
	return binary.LittleEndian.AppendUint64(b, uint64(len(obj.Value)))
}

var errCorrupt = errors.New("disk tier: corrupt object")

// readObject reads and verifies one file.
func readObject(path string) (string, *Object, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", nil, err
	}
	return decode(b, false) // b is ours: the value may alias it
}

// decodeObject verifies and decodes one file's bytes, either version. The
// returned value is a copy: b may be reused.
func decodeObject(b []byte) (string, *Object, error) { return decode(b, true) }

// decode is decodeObject; with clone false the value aliases b.
func decode(b []byte, clone bool) (string, *Object, error) {
	if len(b) < 4+2+36+8+4 {
		return "", nil, errCorrupt
	}
	var expiryLen int
	switch string(b[:4]) {
	case diskMagic:
		expiryLen = 8
	case diskMagicV1:
	default:
		return "", nil, errCorrupt
	}
	body, sum := b[:len(b)-4], binary.LittleEndian.Uint32(b[len(b)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return "", nil, errCorrupt
	}
	kl := int(binary.LittleEndian.Uint16(b[4:]))
	if 6+kl+36+expiryLen+8 > len(body) {
		return "", nil, errCorrupt
	}
	key := string(b[6 : 6+kl])
	p := 6 + kl
	v := func(i int) int32 { return int32(binary.LittleEndian.Uint32(b[p+4*i:])) }
	obj := &Object{Meta: lmproto.Meta{Length: v(0), Fmt: v(1), Dtype: v(2), Location: v(3), Shape: [4]int32{v(4), v(5), v(6), v(7)}}}
	p += 36
	if expiryLen > 0 {
		obj.Expires = int64(binary.LittleEndian.Uint64(b[p:]))
		p += expiryLen
	}
	n := binary.LittleEndian.Uint64(b[p:])
	p += 8
	if uint64(len(body)-p) != n {
		return "", nil, errCorrupt
	}
	obj.Value = body[p:len(body):len(body)]
	if clone {
		obj.Value = bytes.Clone(obj.Value)
	}
	return key, obj, nil
}

// Put writes obj under key: to a temporary file, then renamed into place.
// Room for the temporary file is made (by eviction) before it is written,
// so the directory stays within capacity while both it and the file it
// replaces exist.
func (d *Disk) Put(key string, obj *Object) error {
	if len(key) > MaxKeyBytes {
		// Written anyway, the length would wrap and the file read back corrupt.
		return fmt.Errorf("disk tier: key of %d bytes exceeds %d", len(key), MaxKeyBytes)
	}
	hdr := encodeHeader(key, obj)
	sum := crc32.Update(crc32.Checksum(hdr, castagnoli), castagnoli, obj.Value)
	data := [][]byte{hdr, obj.Value, binary.LittleEndian.AppendUint32(nil, sum)}
	n := int64(len(hdr) + len(obj.Value) + 4)
	size := blocks(n)
	if size > d.capacity {
		return fmt.Errorf("disk tier: object of %d bytes exceeds the capacity", n)
	}
	d.mu.Lock()
	d.evictLocked(size)
	d.reserved += size
	d.touchLocked(key)
	d.mu.Unlock()
	err := d.write(key, data)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.reserved -= size
	if err != nil {
		d.writeErrors.Add(1)
		return err // the file it would have replaced, if any, is intact

	}
	if el, ok := d.items[key]; ok {
		d.removeLocked(el)
	}
	d.items[key] = d.lru.PushFront(&diskEntry{key: key, size: size, expires: obj.Expires})
	d.bytes += size
	d.notifyLocked(key)
	d.evictLocked(0)
	return nil
}

// write puts data in place under key's name through a temporary file.
func (d *Disk) write(key string, data [][]byte) error {
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	tmp := filepath.Join(d.dir, d.tmpPrefix+hex.EncodeToString(rnd[:]))
	if err := writeFile(tmp, data); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("disk tier: write %s: %w", tmp, err)
	}
	if d.beforeRename != nil {
		d.beforeRename()
	}
	if err := os.Rename(tmp, filepath.Join(d.dir, objectName(key))); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("disk tier: rename into place: %w", err)
	}
	return nil
}

// touchLocked records that key changed while Load runs.
func (d *Disk) touchLocked(key string) {
	if d.touched != nil {
		d.touched[objectName(key)] = struct{}{}
	}
}

func writeFile(path string, data [][]byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o640)
	if err != nil {
		return err
	}
	for _, b := range data {
		if _, err := f.Write(b); err != nil {
			_ = f.Close()
			return err
		}
	}
	return f.Close()
}

// evictLocked evicts least recently used objects until what is stored, the
// writes in progress and room more bytes fit in the capacity.
func (d *Disk) evictLocked(room int64) {
	for d.bytes+d.reserved+room > d.capacity {
		back := d.lru.Back()
		if back == nil {
			return
		}
		e := back.Value.(*diskEntry)
		d.lru.Remove(back)
		delete(d.items, e.key)
		d.bytes -= e.size
		d.evictions.Add(1)
		d.notifyLocked(e.key)
		_ = os.Remove(filepath.Join(d.dir, objectName(e.key)))
	}
}

// lookup returns key's live index entry, removing (and deleting the file
// of) an expired one.
func (d *Disk) lookup(key string) (*diskEntry, bool) {
	d.mu.Lock()
	el, ok := d.items[key]
	if !ok {
		d.mu.Unlock()
		return nil, false
	}
	e := el.Value.(*diskEntry)
	if e.expires != 0 && d.now() >= e.expires {
		d.removeLocked(el)
		d.mu.Unlock()
		d.expired.Add(1)
		_ = os.Remove(filepath.Join(d.dir, objectName(key)))
		return nil, false
	}
	d.lru.MoveToFront(el)
	d.mu.Unlock()
	return e, true
}

func (d *Disk) removeLocked(el *list.Element) {
	e := el.Value.(*diskEntry)
	d.bytes -= e.size
	d.lru.Remove(el)
	delete(d.items, e.key)
	d.notifyLocked(e.key)
}

func (d *Disk) notifyLocked(key string) {
	if d.observe != nil {
		d.observe(key)
	}
}

// Observe installs fn (see Observer), replacing any earlier one; nil
// removes it. Install it before Load and before the tier is used.
func (d *Disk) Observe(fn Observer) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.observe = fn
}

// Present reports whether key is indexed and unexpired, without touching
// its recency or reclaiming anything.
func (d *Disk) Present(key string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	el, ok := d.items[key]
	if !ok {
		return false
	}
	e := el.Value.(*diskEntry)
	return e.expires == 0 || d.now() < e.expires
}

// Range calls fn for every indexed unexpired key with the index locked: fn
// must not call into the tier.
func (d *Disk) Range(fn func(key string)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := d.now()
	for k, el := range d.items {
		if e := el.Value.(*diskEntry); e.expires == 0 || now < e.expires {
			fn(k)
		}
	}
}

// Get reads key's object; a missing, expired or corrupt file is a miss.
func (d *Disk) Get(key string) (*Object, bool) {
	if _, ok := d.lookup(key); !ok {
		d.misses.Add(1)
		return nil, false
	}
	got, obj, err := readObject(filepath.Join(d.dir, objectName(key)))
	if err != nil || got != key {
		if !errors.Is(err, io.EOF) {
			d.corrupt.Add(1)
		}
		d.Delete(key)
		d.misses.Add(1)
		return nil, false
	}
	d.hits.Add(1)
	return obj, true
}

// Contains reports whether key is on disk and unexpired.
func (d *Disk) Contains(key string) bool {
	_, ok := d.lookup(key)
	return ok
}

// Expires returns key's expiry in Unix nanoseconds (0: never); ok is false
// when key is absent or expired.
func (d *Disk) Expires(key string) (at int64, ok bool) {
	e, ok := d.lookup(key)
	if !ok {
		return 0, false
	}
	return e.expires, true
}

// Delete removes key; it reports whether it was there unexpired.
func (d *Disk) Delete(key string) bool {
	d.mu.Lock()
	el, indexed := d.items[key]
	live := indexed
	loading := d.touched != nil
	d.touchLocked(key)
	if indexed {
		if e := el.Value.(*diskEntry); e.expires != 0 && d.now() >= e.expires {
			live = false
			d.expired.Add(1)
		}
		d.removeLocked(el)
	}
	d.mu.Unlock()
	if indexed || loading { // live or not: an expired file is garbage too; unindexed while loading
		_ = os.Remove(filepath.Join(d.dir, objectName(key)))
	}
	return live
}

// Stats returns the disk tier's counters (Rejected counts corrupt objects
// found and write errors).
func (d *Disk) Stats() Stats {
	d.mu.Lock()
	defer d.mu.Unlock()
	return Stats{Objects: int64(len(d.items)), Bytes: d.bytes, Capacity: d.capacity,
		Hits: d.hits.Load(), Misses: d.misses.Load(), Evictions: d.evictions.Load(),
		Rejected: d.corrupt.Load() + d.writeErrors.Load(), Expired: d.expired.Load()}
}
