// Package kvevents is the codec of vLLM's KV-cache event stream: the event
// types, the msgpack wire format of event batches (both encodings vLLM has
// used), the block hashes, and the framing of the 3-frame message and of a
// replay reply. It imports no transport: whatever reads or writes the
// stream — the ZMQ publisher and replay client in kvevents/kvzmq, the
// router's subscriber, the cache server's tracker — decodes through it, so
// the format is tested and fuzzed on its own, without sockets.
//
// The format follows vllm/distributed/kv_events.py. Decoding is lenient the way
// vLLM's consumers must be: optional trailing fields may be missing, new ones
// may be appended, map-encoded events may carry unknown keys, and hashes may be
// unsigned, signed or raw bytes.
package kvevents

import "strconv"

// Event is one KV-cache event in a Batch. The set is closed: BlockStored,
// BlockRemoved and AllBlocksCleared (values or pointers) are the only
// implementations. DecodeBatch always produces values.
type Event interface {
	eventType() string
}

// Event type tags as they appear on the wire (the msgspec class names).
const (
	TypeBlockStored      = "BlockStored"
	TypeBlockRemoved     = "BlockRemoved"
	TypeAllBlocksCleared = "AllBlocksCleared"
)

// BlockStored reports that full blocks entered the prefix cache of one medium.
//
// TokenIDs covers only the newly stored blocks, BlockSize tokens each, in the
// order of BlockHashes; the first block's parent is ParentBlockHash (nil at the
// start of a sequence). Optional fields are nil or "" when vLLM sent nil or
// omitted them.
type BlockStored struct {
	BlockHashes     []BlockHash
	ParentBlockHash *BlockHash
	TokenIDs        []uint32
	BlockSize       int
	// LoRAID is deprecated upstream in favour of LoRAName.
	LoRAID   *int64
	Medium   string // "GPU", "CPU", ...; "" when nil on the wire
	LoRAName string // "" when nil on the wire
	// ExtraKeys is the raw msgpack encoding of extra_keys (one entry per
	// block: a tuple of multimodal ids, LoRA name, cache_salt, ... or nil),
	// kept verbatim because its schema is still moving upstream. nil when
	// absent or nil on the wire. EncodeBatch rejects bytes that are not
	// exactly one msgpack value.
	ExtraKeys []byte
	// GroupIdx is the KV-cache group of hybrid models (nil when absent).
	GroupIdx *int64
	// KVCacheSpecKind names the group's cache spec ("full_attention",
	// "sliding_window", ...); "" when absent.
	KVCacheSpecKind string
	// KVCacheSpecSlidingWindow is the sliding window size of the group's
	// spec, nil when absent.
	KVCacheSpecSlidingWindow *int64
}

// BlockRemoved reports that blocks left the prefix cache of one medium.
type BlockRemoved struct {
	BlockHashes []BlockHash
	Medium      string // "" when nil on the wire
	GroupIdx    *int64 // nil when absent
}

// AllBlocksCleared reports that the whole prefix cache was reset (sleep,
// weight update, explicit reset).
type AllBlocksCleared struct{}

func (BlockStored) eventType() string      { return TypeBlockStored }
func (BlockRemoved) eventType() string     { return TypeBlockRemoved }
func (AllBlocksCleared) eventType() string { return TypeAllBlocksCleared }

// Batch is one published message: the events of one engine step.
type Batch struct {
	// TS is the wall-clock time of the step in seconds since the Unix epoch.
	TS     float64
	Events []Event
	// DataParallelRank is the rank of the publishing engine; nil when the
	// envelope omits it (vLLM before 0.10) or carries nil. vLLM's publisher
	// always fills it (0 without DP).
	DataParallelRank *int64
}

// Encoding selects how EncodeBatch writes events. The batch envelope is the
// positional array [ts, events, data_parallel_rank] in both: vLLM's
// EventBatch stays array_like.
type Encoding int

const (
	// Positional writes each event as an array led by its type tag with
	// every field of the latest layout, nil where unset, as vLLM did before
	// vllm-project/vllm#42892 (mid-2026). msgspec ignores omit_defaults for
	// array_like structs (msgspec/msgspec#720), so nothing is left out.
	Positional Encoding = iota
	// MapEncoding writes each event as a map with a "type" key, as vLLM does
	// since vllm-project/vllm#42892 (v0.26). Fields with a default
	// (extra_keys onwards) are omitted while at it, as omit_defaults does;
	// the others are always written, nil where unset.
	MapEncoding
)

// String returns "positional" or "map".
func (e Encoding) String() string {
	switch e {
	case Positional:
		return "positional"
	case MapEncoding:
		return "map"
	}
	return "Encoding(" + strconv.Itoa(int(e)) + ")"
}
