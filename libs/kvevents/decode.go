package kvevents

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// Nesting depths, for the skip bound.
const (
	depthEvent = 2 // envelope, events list, event
	depthField = 3
)

// DecodeBatch decodes one payload as vLLM publishes it. It accepts:
//   - the envelope as an array [ts, events, data_parallel_rank?, ...] or as a
//     map with keys "ts", "events", "data_parallel_rank";
//   - events as positional arrays or as maps with a "type" key, mixed freely;
//   - hashes as unsigned or signed integers or bin;
//   - missing optional trailing fields, unknown extra trailing positional
//     fields, and unknown map keys (all ignored).
//
// Events of a type this package does not know are skipped, so a newer vLLM
// that adds event types does not break consumers. nil and empty lists both
// decode as nil slices.
//
// Every error wraps ErrMalformed; DecodeBatch never panics. Allocations are
// bounded by the payload size: no length is trusted beyond the bytes that
// remain. The result does not reference payload.
func DecodeBatch(payload []byte) (Batch, error) {
	r := newReader(payload)
	b, err := r.batch()
	if err == nil && r.remaining() != 0 {
		err = fmt.Errorf("%d bytes after the batch", r.remaining())
	}
	if err != nil {
		return Batch{}, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	return b, nil
}

func (r *reader) batch() (Batch, error) {
	c, err := r.peek()
	if err != nil {
		return Batch{}, err
	}
	if msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32 {
		return r.mapBatch()
	}
	n, err := r.arrayLen()
	if err != nil {
		return Batch{}, fmt.Errorf("envelope: %w", err)
	}
	if n < 2 {
		return Batch{}, fmt.Errorf("envelope has %d fields, want at least 2", n)
	}
	var b Batch
	if b.TS, err = r.float(); err != nil {
		return Batch{}, fmt.Errorf("ts: %w", err)
	}
	if b.Events, err = r.events(); err != nil {
		return Batch{}, err
	}
	if n >= 3 {
		if b.DataParallelRank, err = r.optInt64(); err != nil {
			return Batch{}, fmt.Errorf("data_parallel_rank: %w", err)
		}
	}
	for range n - 3 {
		if err := r.skip(1); err != nil {
			return Batch{}, err
		}
	}
	return b, nil
}

func (r *reader) mapBatch() (Batch, error) {
	n, err := r.mapLen()
	if err != nil {
		return Batch{}, fmt.Errorf("envelope: %w", err)
	}
	var (
		b                  Batch
		haveTS, haveEvents bool
	)
	for range n {
		key, err := r.mapKey(1)
		if err != nil {
			return Batch{}, err
		}
		switch key {
		case "ts":
			if b.TS, err = r.float(); err != nil {
				return Batch{}, fmt.Errorf("ts: %w", err)
			}
			haveTS = true
		case "events":
			if b.Events, err = r.events(); err != nil {
				return Batch{}, err
			}
			haveEvents = true
		case "data_parallel_rank":
			if b.DataParallelRank, err = r.optInt64(); err != nil {
				return Batch{}, fmt.Errorf("data_parallel_rank: %w", err)
			}
		default:
			if err := r.skip(1); err != nil {
				return Batch{}, err
			}
		}
	}
	if !haveTS || !haveEvents {
		return Batch{}, errors.New("envelope map without ts or events")
	}
	return b, nil
}

// mapKey reads a string key; other keys are skipped and read as "".
func (r *reader) mapKey(depth int) (string, error) {
	c, err := r.peek()
	if err != nil {
		return "", err
	}
	if msgpcode.IsString(c) {
		return r.str()
	}
	return "", r.skip(depth)
}

func (r *reader) events() ([]Event, error) {
	n, err := r.arrayLen()
	if err != nil {
		return nil, fmt.Errorf("events: %w", err)
	}
	if n == 0 {
		return nil, nil
	}
	out := make([]Event, 0, n)
	for i := range n {
		ev, err := r.event()
		if err != nil {
			return nil, fmt.Errorf("events[%d]: %w", i, err)
		}
		if ev != nil {
			out = append(out, ev)
		}
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

// event decodes one event; it returns nil, nil for an unknown type.
func (r *reader) event() (Event, error) {
	c, err := r.peek()
	if err != nil {
		return nil, err
	}
	if msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32 {
		return r.mapEvent()
	}
	n, err := r.arrayLen()
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, errors.New("empty event")
	}
	tag, err := r.str()
	if err != nil {
		return nil, fmt.Errorf("type: %w", err)
	}
	layout, known := layoutOf(tag)
	var (
		st   BlockStored
		have uint32
	)
	for i := 1; i < n; i++ {
		if !known || i-1 >= len(layout) {
			if err := r.skip(depthField); err != nil {
				return nil, err
			}
			continue
		}
		f := layout[i-1]
		if err := r.field(f, &st); err != nil {
			return nil, fmt.Errorf("%s.%s: %w", tag, fieldNames[f], err)
		}
		have |= 1 << f
	}
	if !known {
		return nil, nil
	}
	return build(tag, have, &st)
}

// mapEvent decodes a map-encoded event. Keys may come in any order, so it
// first notes where each known value starts, then decodes those it needs.
func (r *reader) mapEvent() (Event, error) {
	n, err := r.mapLen()
	if err != nil {
		return nil, err
	}
	var (
		at    [numFields]int // offset+1 of each field's value; 0 when absent
		tagAt int
	)
	for range n {
		key, err := r.mapKey(depthField)
		if err != nil {
			return nil, err
		}
		start := r.offset() + 1
		if err := r.skip(depthField); err != nil {
			return nil, err
		}
		if key == "type" {
			tagAt = start
		} else if f := fieldIndex(key); f >= 0 {
			at[f] = start
		}
	}
	end := r.offset()
	if tagAt == 0 {
		return nil, errors.New("event map without type")
	}
	r.seek(tagAt - 1)
	tag, err := r.str()
	if err != nil {
		return nil, fmt.Errorf("type: %w", err)
	}
	layout, known := layoutOf(tag)
	if !known {
		r.seek(end)
		return nil, nil
	}
	var (
		st   BlockStored
		have uint32
	)
	for _, f := range layout {
		if at[f] == 0 {
			continue
		}
		r.seek(at[f] - 1)
		if err := r.field(f, &st); err != nil {
			return nil, fmt.Errorf("%s.%s: %w", tag, fieldNames[f], err)
		}
		have |= 1 << f
	}
	r.seek(end)
	return build(tag, have, &st)
}

func fieldIndex(key string) int {
	for f, name := range fieldNames {
		if name == key {
			return f
		}
	}
	return -1
}

// layoutOf returns the positional field layout of an event type and whether
// the type is known.
func layoutOf(tag string) ([]int, bool) {
	switch tag {
	case TypeBlockStored:
		return storedLayout, true
	case TypeBlockRemoved:
		return removedLayout, true
	case TypeAllBlocksCleared:
		return nil, true
	}
	return nil, false
}

// build turns the decoded fields into the event of type tag.
func build(tag string, have uint32, st *BlockStored) (Event, error) {
	switch tag {
	case TypeBlockStored:
		if err := checkRequired(tag, have, storedRequired); err != nil {
			return nil, err
		}
		return *st, nil
	case TypeBlockRemoved:
		if err := checkRequired(tag, have, removedRequired); err != nil {
			return nil, err
		}
		return BlockRemoved{BlockHashes: st.BlockHashes, Medium: st.Medium, GroupIdx: st.GroupIdx}, nil
	}
	return AllBlocksCleared{}, nil
}

func checkRequired(tag string, have, required uint32) error {
	missing := required &^ have
	if missing == 0 {
		return nil
	}
	var names []string
	for f := range numFields {
		if missing&(1<<f) != 0 {
			names = append(names, fieldNames[f])
		}
	}
	return fmt.Errorf("%s without %s", tag, strings.Join(names, ", "))
}

// field decodes field f into st (BlockRemoved shares BlockStored's fields).
func (r *reader) field(f int, st *BlockStored) error {
	var err error
	switch f {
	case fBlockHashes:
		st.BlockHashes, err = r.hashes()
	case fParentBlockHash:
		var isNil bool
		if isNil, err = r.nextIsNil(); err == nil && !isNil {
			var h BlockHash
			if h, err = r.hash(); err == nil {
				st.ParentBlockHash = &h
			}
		}
	case fTokenIDs:
		st.TokenIDs, err = r.tokenIDs()
	case fBlockSize:
		var v int64
		if v, err = r.int64(); err == nil {
			if v < 0 || v > math.MaxInt {
				return fmt.Errorf("block size %d out of range", v)
			}
			st.BlockSize = int(v)
		}
	case fLoRAID:
		st.LoRAID, err = r.optInt64()
	case fMedium:
		st.Medium, err = r.optStr()
	case fLoRAName:
		st.LoRAName, err = r.optStr()
	case fExtraKeys:
		st.ExtraKeys, err = r.raw(depthField)
	case fGroupIdx:
		st.GroupIdx, err = r.optInt64()
	case fKVCacheSpecKind:
		st.KVCacheSpecKind, err = r.optStr()
	case fKVCacheSpecSlidingWindow:
		st.KVCacheSpecSlidingWindow, err = r.optInt64()
	}
	return err
}

func (r *reader) tokenIDs() ([]uint32, error) {
	n, err := r.arrayLen()
	if err != nil || n == 0 {
		return nil, err
	}
	out := make([]uint32, n)
	for i := range out {
		v, err := r.int64()
		if err != nil {
			return nil, fmt.Errorf("[%d]: %w", i, err)
		}
		if v < 0 || v > math.MaxUint32 {
			return nil, fmt.Errorf("[%d]: token id %d out of range", i, v)
		}
		out[i] = uint32(v)
	}
	return out, nil
}
