// Package l2events publishes what the cache server's store holds as vLLM
// KV events (libs/kvevents): a BlockStored when an LMCache chunk's key
// becomes present anywhere in the server, a BlockRemoved when it is present
// nowhere any more, one ZMQ topic per model, and a snapshot consistent with
// the stream for subscribers that join late.
package l2events

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// HashLen is the length of a normalised chunk hash.
const HashLen = 32

// Key is what an LMCache key names: one worker's part of one chunk of a
// model's KV cache.
type Key struct {
	Model    string
	WorkerID int
	// Hash is the chunk hash as a 32-byte big-endian number: LMCache may
	// print it as the hex of an integer (leading zeros dropped) or as 64 hex
	// digits (the simulator's sha256); both name the same chunk, so both
	// must give the same bytes.
	Hash [HashLen]byte
}

// ErrKey is wrapped by ParseKey's errors: the key is not LMCache's.
var ErrKey = errors.New("not an LMCache chunk key")

// The suffixes LMCache's RESP connectors append to a chunk's key: the redis
// connector with no separator, the valkey connector after a colon. lm://
// stores the bare key, which holds the data.
var suffixes = []struct {
	s    string
	data bool
}{
	{":kv_bytes", true}, {"kv_bytes", true},
	{":metadata", false}, {"metadata", false},
}

// ParseKey parses a stored key: `model@world_size@worker_id@<chunk hash
// hex>@<dtype>`, optionally led by `fmt@` (older LMCache) and followed by
// one of the RESP connectors' suffixes. data reports whether the key holds
// the chunk's bytes (bare, or a kv_bytes key) rather than its metadata:
// only data keys make events, so a chunk stored over RESP counts once.
func ParseKey(key string) (k Key, data bool, err error) {
	base, data := key, true
	for _, sfx := range suffixes {
		if b, ok := strings.CutSuffix(key, sfx.s); ok {
			base, data = b, sfx.data
			break
		}
	}
	// Split by hand into a fixed array: the store's hook parses every key
	// it changes, under the store's lock, so this allocates nothing.
	var fields [6]string
	n := strings.Count(base, "@") + 1
	if n != 5 && n != 6 {
		return Key{}, false, fmt.Errorf("%w: %q: %d @-separated fields, want 5 or 6", ErrKey, key, n)
	}
	rest := base
	for i := range n - 1 {
		fields[i], rest, _ = strings.Cut(rest, "@")
	}
	fields[n-1] = rest
	parts := fields[:n]
	if n == 6 {
		if parts[0] == "" {
			return Key{}, false, fmt.Errorf("%w: %q: empty fmt", ErrKey, key)
		}
		parts = parts[1:] // fmt: the same chunk whatever layout it was saved in
	}
	model, worldSize, worker, hash, dtype := parts[0], parts[1], parts[2], parts[3], parts[4]
	if model == "" || dtype == "" {
		return Key{}, false, fmt.Errorf("%w: %q: empty model or dtype", ErrKey, key)
	}
	if _, err := parseCount(worldSize); err != nil {
		return Key{}, false, fmt.Errorf("%w: %q: world size: %w", ErrKey, key, err)
	}
	if k.WorkerID, err = parseCount(worker); err != nil {
		return Key{}, false, fmt.Errorf("%w: %q: worker id: %w", ErrKey, key, err)
	}
	if k.Hash, err = ParseHash(hash); err != nil {
		return Key{}, false, fmt.Errorf("%w: %q: %w", ErrKey, key, err)
	}
	k.Model = model
	return k, data, nil
}

// parseCount parses a non-negative decimal integer.
func parseCount(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || s[0] == '+' {
		return 0, fmt.Errorf("%q is not a non-negative integer", s)
	}
	return n, nil
}

// ParseHash reads hex (an optional 0x prefix, either case) as a big-endian
// unsigned number and returns it left-padded to 32 bytes. A number that
// needs more than 32 bytes is an error.
func ParseHash(s string) ([HashLen]byte, error) {
	var out [HashLen]byte
	digits := strings.TrimPrefix(strings.TrimPrefix(s, "0x"), "0X")
	if digits == "" {
		return out, fmt.Errorf("chunk hash %q: no hex digits", s)
	}
	digits = strings.TrimLeft(digits, "0")
	if len(digits) > 2*HashLen {
		return out, fmt.Errorf("chunk hash %q: more than %d bytes", s, HashLen)
	}
	// Right-aligned: an odd count of digits leaves the first byte's high
	// nibble zero.
	for i := 0; i < len(digits); i++ {
		v, ok := unhex(digits[len(digits)-1-i])
		if !ok {
			return [HashLen]byte{}, fmt.Errorf("chunk hash %q: %q is not a hex digit", s, digits[len(digits)-1-i])
		}
		out[HashLen-1-i/2] |= v << (4 * (i % 2))
	}
	return out, nil
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
