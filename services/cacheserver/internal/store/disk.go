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

	hits, misses, evictions, corrupt, writeErrors, expired atomic.Uint64
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
// rebuilds its index from the files there: partial writes (temporary files),
// corrupt objects and expired ones are deleted. Files are read back oldest
// first, so the LRU order survives a restart approximately. now is the
// clock expiries are measured against (time.Now when nil).
func OpenDisk(dir string, capacity int64, now func() time.Time) (*Disk, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("disk tier: %w", err)
	}
	if now == nil {
		now = time.Now
	}
	d := &Disk{dir: dir, capacity: capacity, clock: now, items: map[string]*list.Element{}, lru: list.New()}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("disk tier: %w", err)
	}
	type found struct {
		key            string
		size           int64
		mtime, expires int64
	}
	var objs []found
	for _, e := range entries {
		path := filepath.Join(dir, e.Name())
		switch {
		case strings.HasPrefix(e.Name(), ".tmp-"):
			_ = os.Remove(path) // a write that never finished
		case strings.HasSuffix(e.Name(), ".obj"):
			key, obj, err := readObject(path)
			info, ierr := e.Info()
			if err != nil || ierr != nil || objectName(key) != e.Name() {
				d.corrupt.Add(1)
				_ = os.Remove(path)
				continue
			}
			if obj.expired(d.now()) {
				d.expired.Add(1)
				_ = os.Remove(path)
				continue
			}
			objs = append(objs, found{key, info.Size(), info.ModTime().UnixNano(), obj.Expires})
		}
	}
	sort.Slice(objs, func(i, j int) bool { return objs[i].mtime < objs[j].mtime })
	for _, o := range objs {
		d.items[o.key] = d.lru.PushFront(&diskEntry{key: o.key, size: o.size, expires: o.expires})
		d.bytes += o.size
	}
	d.mu.Lock()
	d.evictLocked()
	d.mu.Unlock()
	return d, nil
}

func (d *Disk) now() int64 { return d.clock().UnixNano() }

func objectName(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:]) + ".obj"
}

func encodeObject(key string, obj *Object) []byte {
	b := make([]byte, 0, 4+2+len(key)+36+8+8+len(obj.Value)+4)
	b = append(b, diskMagic...)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(key)))
	b = append(b, key...)
	m := obj.Meta
	for _, v := range []int32{m.Length, m.Fmt, m.Dtype, m.Location, m.Shape[0], m.Shape[1], m.Shape[2], m.Shape[3], 0} {
		b = binary.LittleEndian.AppendUint32(b, uint32(v))
	}
	b = binary.LittleEndian.AppendUint64(b, uint64(obj.Expires))
	b = binary.LittleEndian.AppendUint64(b, uint64(len(obj.Value)))
	b = append(b, obj.Value...)
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

var errCorrupt = errors.New("disk tier: corrupt object")

// readObject reads and verifies one file.
func readObject(path string) (string, *Object, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", nil, err
	}
	return decodeObject(b)
}

// decodeObject verifies and decodes one file's bytes, either version. The
// returned value is a copy: b may be reused.
func decodeObject(b []byte) (string, *Object, error) {
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
	obj.Value = bytes.Clone(body[p:])
	return key, obj, nil
}

// Put writes obj under key: to a temporary file, then renamed into place.
func (d *Disk) Put(key string, obj *Object) error {
	if len(key) > MaxKeyBytes {
		// Written anyway, the length would wrap and the file read back corrupt.
		return fmt.Errorf("disk tier: key of %d bytes exceeds %d", len(key), MaxKeyBytes)
	}
	data := encodeObject(key, obj)
	if int64(len(data)) > d.capacity {
		return fmt.Errorf("disk tier: object of %d bytes exceeds the capacity", len(data))
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	tmp := filepath.Join(d.dir, ".tmp-"+hex.EncodeToString(rnd[:]))
	if err := writeFile(tmp, data); err != nil {
		_ = os.Remove(tmp)
		d.writeErrors.Add(1)
		return fmt.Errorf("disk tier: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(d.dir, objectName(key))); err != nil {
		_ = os.Remove(tmp)
		d.writeErrors.Add(1)
		return fmt.Errorf("disk tier: %w", err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if el, ok := d.items[key]; ok {
		d.bytes -= el.Value.(*diskEntry).size
		d.lru.Remove(el)
	}
	d.items[key] = d.lru.PushFront(&diskEntry{key: key, size: int64(len(data)), expires: obj.Expires})
	d.bytes += int64(len(data))
	d.evictLocked()
	return nil
}

func writeFile(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o640)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

func (d *Disk) evictLocked() {
	for d.bytes > d.capacity {
		back := d.lru.Back()
		if back == nil {
			return
		}
		e := back.Value.(*diskEntry)
		d.lru.Remove(back)
		delete(d.items, e.key)
		d.bytes -= e.size
		d.evictions.Add(1)
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
	if indexed {
		if e := el.Value.(*diskEntry); e.expires != 0 && d.now() >= e.expires {
			live = false
			d.expired.Add(1)
		}
		d.removeLocked(el)
	}
	d.mu.Unlock()
	if indexed { // live or not: an expired file is garbage too
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
