package kvevents

import (
	"encoding/binary"
	"encoding/hex"
	"strconv"
	"strings"
)

// BlockHash is an engine block hash exactly as vLLM puts it on the wire: an
// integer (the default; the last 8 bytes of the digest, big-endian) or raw
// bytes (msgpack bin, with VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0).
//
// Older vLLM versions sent integer hashes as signed int64; those are stored in
// two's complement, so -1 and 0xFFFFFFFFFFFFFFFF are the same hash.
//
// BlockHash is comparable and may be used as a map key: two hashes are equal
// when they have the same kind and the same value. An integer hash never
// equals a bytes hash, even when the bytes are its 8-byte big-endian form.
// The zero value is the empty bytes hash, which vLLM never sends.
type BlockHash struct {
	raw   string // bytes hashes: the raw bytes; empty for integer hashes
	n     uint64 // integer hashes: the value; bytes hashes: derived from raw
	isInt bool
}

// IsZero reports whether h is the integer 0 or bytes that are all zero:
// what some publishers send for "no parent".
func (h BlockHash) IsZero() bool {
	if h.isInt {
		return h.n == 0
	}
	return strings.Trim(h.raw, "\x00") == ""
}

// IntHash returns the integer block hash v.
func IntHash(v uint64) BlockHash {
	return BlockHash{n: v, isInt: true}
}

// BytesHash returns the bytes block hash b. It copies b.
func BytesHash(b []byte) BlockHash {
	return BlockHash{raw: string(b), n: lastUint64(b)}
}

// bytesHashString is BytesHash for bytes already held in a string.
func bytesHashString(s string) BlockHash {
	return BlockHash{raw: s, n: lastUint64([]byte(s))}
}

// lastUint64 reads the last 8 bytes of b as a big-endian integer; shorter
// inputs are zero-extended on the left.
func lastUint64(b []byte) uint64 {
	if len(b) >= 8 {
		return binary.BigEndian.Uint64(b[len(b)-8:])
	}
	var buf [8]byte
	copy(buf[8-len(b):], b)
	return binary.BigEndian.Uint64(buf[:])
}

// IsInt reports whether h is an integer hash.
func (h BlockHash) IsInt() bool { return h.isInt }

// Uint64 returns the value of an integer hash. For a bytes hash it returns the
// last 8 bytes big-endian (zero-extended when shorter), which is the integer
// vLLM would have sent for the same digest.
func (h BlockHash) Uint64() uint64 { return h.n }

// Bytes returns a fresh copy of the raw bytes of a bytes hash, or the 8-byte
// big-endian form of an integer hash. The caller may keep and modify it.
func (h BlockHash) Bytes() []byte {
	if h.isInt {
		return binary.BigEndian.AppendUint64(nil, h.n)
	}
	return []byte(h.raw)
}

// String returns an integer hash in decimal and a bytes hash as "0x" followed
// by lowercase hex, so the two kinds never print alike.
func (h BlockHash) String() string {
	if h.isInt {
		return strconv.FormatUint(h.n, 10)
	}
	return "0x" + hex.EncodeToString([]byte(h.raw))
}
