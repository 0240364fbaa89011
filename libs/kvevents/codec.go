package kvevents

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// Field indices shared by both event encodings. The order is vLLM's
// declaration order, which is also the positional order.
const (
	fBlockHashes = iota
	fParentBlockHash
	fTokenIDs
	fBlockSize
	fLoRAID
	fMedium
	fLoRAName
	fExtraKeys
	fGroupIdx
	fKVCacheSpecKind
	fKVCacheSpecSlidingWindow
	numFields
)

// fieldNames are the map keys of the fields above.
var fieldNames = [numFields]string{
	"block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id",
	"medium", "lora_name", "extra_keys", "group_idx", "kv_cache_spec_kind",
	"kv_cache_spec_sliding_window",
}

// Positional layouts after the tag; fields past the end are optional.
var (
	storedLayout = []int{
		fBlockHashes, fParentBlockHash, fTokenIDs, fBlockSize, fLoRAID, fMedium,
		fLoRAName, fExtraKeys, fGroupIdx, fKVCacheSpecKind, fKVCacheSpecSlidingWindow,
	}
	removedLayout = []int{fBlockHashes, fMedium, fGroupIdx}
)

// Required fields (as a bit set over field indices) per event type.
const (
	storedRequired  = 1<<fBlockHashes | 1<<fTokenIDs | 1<<fBlockSize
	removedRequired = 1 << fBlockHashes
)

// EncodeBatch returns the msgpack payload of b laid out as vLLM's msgspec
// encoder lays it out in the chosen encoding (see Encoding): declaration
// field order, integers in their smallest form, ts as float64, integer hashes
// unsigned and bytes hashes as bin. The envelope is always the array
// [ts, events, data_parallel_rank], the rank nil when unset. Events may be
// values or pointers; a nil event or pointer, a negative BlockSize, or
// ExtraKeys that are not one msgpack value is an error.
func EncodeBatch(b Batch, enc Encoding) ([]byte, error) {
	if enc != Positional && enc != MapEncoding {
		return nil, fmt.Errorf("kvevents: encode batch: unknown encoding %d", int(enc))
	}
	var buf bytes.Buffer
	e := msgpack.NewEncoder(&buf)
	w := writer{e: e, buf: &buf}
	w.arrayLen(3)
	w.float(b.TS)
	w.arrayLen(len(b.Events))
	for i, ev := range b.Events {
		if err := w.event(ev, enc); err != nil {
			return nil, fmt.Errorf("kvevents: encode batch: events[%d]: %w", i, err)
		}
	}
	w.optInt(b.DataParallelRank)
	if w.err != nil {
		return nil, fmt.Errorf("kvevents: encode batch: %w", w.err)
	}
	return buf.Bytes(), nil
}

// writer wraps the msgpack encoder and keeps its first error. Writes to a
// bytes.Buffer cannot fail, so the error is only ever a guard.
type writer struct {
	e   *msgpack.Encoder
	buf *bytes.Buffer
	err error
}

func (w *writer) keep(err error) {
	if w.err == nil {
		w.err = err
	}
}

func (w *writer) arrayLen(n int)  { w.keep(w.e.EncodeArrayLen(n)) }
func (w *writer) mapLen(n int)    { w.keep(w.e.EncodeMapLen(n)) }
func (w *writer) str(s string)    { w.keep(w.e.EncodeString(s)) }
func (w *writer) int(v int64)     { w.keep(w.e.EncodeInt(v)) }
func (w *writer) float(f float64) { w.keep(w.e.EncodeFloat64(f)) }
func (w *writer) nil()            { w.keep(w.e.EncodeNil()) }

func (w *writer) optStr(s string) {
	if s == "" {
		w.nil()
		return
	}
	w.str(s)
}

func (w *writer) optInt(v *int64) {
	if v == nil {
		w.nil()
		return
	}
	w.int(*v)
}

func (w *writer) hash(h BlockHash) {
	if h.isInt {
		w.keep(w.e.EncodeUint(h.n))
		return
	}
	w.keep(w.e.EncodeBytesLen(len(h.raw)))
	w.buf.WriteString(h.raw)
}

func (w *writer) hashes(hs []BlockHash) {
	w.arrayLen(len(hs))
	for _, h := range hs {
		w.hash(h)
	}
}

func (w *writer) event(ev Event, enc Encoding) error {
	switch ev := ev.(type) {
	case BlockStored:
		return w.stored(&ev, enc)
	case *BlockStored:
		if ev != nil {
			return w.stored(ev, enc)
		}
	case BlockRemoved:
		w.removed(&ev, enc)
		return nil
	case *BlockRemoved:
		if ev != nil {
			w.removed(ev, enc)
			return nil
		}
	case AllBlocksCleared:
		w.header(TypeAllBlocksCleared, 1, enc)
		return nil
	case *AllBlocksCleared:
		if ev != nil {
			w.header(TypeAllBlocksCleared, 1, enc)
			return nil
		}
	}
	return errors.New("nil event")
}

// header writes the event container and its type tag; n counts the tag.
func (w *writer) header(tag string, n int, enc Encoding) {
	if enc == MapEncoding {
		w.mapLen(n)
		w.str("type")
	} else {
		w.arrayLen(n)
	}
	w.str(tag)
}

// key writes a map key in map encoding and nothing in positional encoding.
func (w *writer) key(f int, enc Encoding) {
	if enc == MapEncoding {
		w.str(fieldNames[f])
	}
}

func (w *writer) stored(ev *BlockStored, enc Encoding) error {
	if ev.BlockSize < 0 {
		return fmt.Errorf("negative block_size %d", ev.BlockSize)
	}
	extra := ev.ExtraKeys
	if bytes.Equal(extra, []byte{0xc0}) { // an explicit msgpack nil
		extra = nil
	}
	if extra != nil {
		if err := validRaw(extra); err != nil {
			return fmt.Errorf("extra_keys: %w", err)
		}
	}
	// Whether each optional field (fExtraKeys onwards, in order) differs
	// from its default.
	set := [numFields - fExtraKeys]bool{
		extra != nil,
		ev.GroupIdx != nil,
		ev.KVCacheSpecKind != "",
		ev.KVCacheSpecSlidingWindow != nil,
	}
	n := 1 + numFields // tag and every field
	if enc == MapEncoding {
		n = 1 + fExtraKeys // tag and the fields without a default
		for _, s := range set {
			if s {
				n++
			}
		}
	}
	w.header(TypeBlockStored, n, enc)

	w.key(fBlockHashes, enc)
	w.hashes(ev.BlockHashes)
	w.key(fParentBlockHash, enc)
	if ev.ParentBlockHash == nil {
		w.nil()
	} else {
		w.hash(*ev.ParentBlockHash)
	}
	w.key(fTokenIDs, enc)
	w.arrayLen(len(ev.TokenIDs))
	for _, t := range ev.TokenIDs {
		w.keep(w.e.EncodeUint(uint64(t)))
	}
	w.key(fBlockSize, enc)
	w.int(int64(ev.BlockSize))
	w.key(fLoRAID, enc)
	w.optInt(ev.LoRAID)
	w.key(fMedium, enc)
	w.optStr(ev.Medium)
	w.key(fLoRAName, enc)
	w.optStr(ev.LoRAName)

	written := 1 + fExtraKeys
	for f := fExtraKeys; f < numFields && written < n; f++ {
		if enc == MapEncoding && !set[f-fExtraKeys] {
			continue
		}
		w.key(f, enc)
		switch f {
		case fExtraKeys:
			if extra == nil {
				w.nil()
			} else {
				w.buf.Write(extra)
			}
		case fGroupIdx:
			w.optInt(ev.GroupIdx)
		case fKVCacheSpecKind:
			w.optStr(ev.KVCacheSpecKind)
		case fKVCacheSpecSlidingWindow:
			w.optInt(ev.KVCacheSpecSlidingWindow)
		}
		written++
	}
	return nil
}

func (w *writer) removed(ev *BlockRemoved, enc Encoding) {
	n := 4 // tag, block_hashes, medium, group_idx
	if enc == MapEncoding && ev.GroupIdx == nil {
		n = 3
	}
	w.header(TypeBlockRemoved, n, enc)
	w.key(fBlockHashes, enc)
	w.hashes(ev.BlockHashes)
	w.key(fMedium, enc)
	w.optStr(ev.Medium)
	if n == 4 {
		w.key(fGroupIdx, enc)
		w.optInt(ev.GroupIdx)
	}
}
