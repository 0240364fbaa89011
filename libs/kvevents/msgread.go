package kvevents

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// ErrMalformed is wrapped by every error DecodeBatch returns: the payload is
// not a valid event batch.
var ErrMalformed = errors.New("kvevents: malformed batch")

// maxDepth bounds the nesting of values DecodeBatch walks through, so that a
// payload of nested one-element arrays cannot exhaust the stack.
const maxDepth = 64

// reader reads msgpack values from an in-memory payload. Every length read
// from the payload is checked against the bytes that remain before anything
// is allocated, so a short payload cannot claim a huge array or string.
//
// The msgpack decoder reads straight from br (bytes.Reader is a
// io.ByteScanner, so msgpack adds no buffer of its own); offsets into src are
// therefore exact and the reader may seek.
type reader struct {
	src []byte
	br  *bytes.Reader
	d   *msgpack.Decoder
}

func newReader(src []byte) *reader {
	br := bytes.NewReader(src)
	return &reader{src: src, br: br, d: msgpack.NewDecoder(br)}
}

// remaining is the number of unread bytes.
func (r *reader) remaining() int { return r.br.Len() }

// offset is the position of the next unread byte in src.
func (r *reader) offset() int { return len(r.src) - r.br.Len() }

// seek moves to offset off of src.
func (r *reader) seek(off int) {
	_, _ = r.br.Seek(int64(off), io.SeekStart) // off is always within src
}

func (r *reader) peek() (byte, error) {
	c, err := r.d.PeekCode()
	if err != nil {
		return 0, errors.New("unexpected end of payload")
	}
	return c, nil
}

// nextIsNil consumes a nil and reports true when the next value is nil.
func (r *reader) nextIsNil() (bool, error) {
	c, err := r.peek()
	if err != nil || c != msgpcode.Nil {
		return false, err
	}
	return true, r.d.DecodeNil()
}

// arrayLen reads an array header; nil reads as an empty array. Each element
// takes at least one byte, which bounds n.
func (r *reader) arrayLen() (int, error) {
	c, err := r.peek()
	if err != nil {
		return 0, err
	}
	if c != msgpcode.Nil && !msgpcode.IsFixedArray(c) && c != msgpcode.Array16 && c != msgpcode.Array32 {
		return 0, fmt.Errorf("want array, got code 0x%02x", c)
	}
	n, err := r.d.DecodeArrayLen()
	if err != nil {
		return 0, fmt.Errorf("array header: %w", err)
	}
	if n > r.remaining() {
		return 0, fmt.Errorf("array of %d elements in %d remaining bytes", n, r.remaining())
	}
	return max(n, 0), nil
}

// mapLen reads a map header. Each entry takes at least two bytes.
func (r *reader) mapLen() (int, error) {
	c, err := r.peek()
	if err != nil {
		return 0, err
	}
	if !msgpcode.IsFixedMap(c) && c != msgpcode.Map16 && c != msgpcode.Map32 {
		return 0, fmt.Errorf("want map, got code 0x%02x", c)
	}
	n, err := r.d.DecodeMapLen()
	if err != nil {
		return 0, fmt.Errorf("map header: %w", err)
	}
	if n > r.remaining()/2 {
		return 0, fmt.Errorf("map of %d entries in %d remaining bytes", n, r.remaining())
	}
	return n, nil
}

// blob reads the body of a str or bin value whose header the decoder has not
// yet consumed.
func (r *reader) blob() ([]byte, error) {
	n, err := r.d.DecodeBytesLen()
	if err != nil {
		return nil, fmt.Errorf("string header: %w", err)
	}
	if n < 0 || n > r.remaining() {
		return nil, fmt.Errorf("string of %d bytes in %d remaining bytes", n, r.remaining())
	}
	b := make([]byte, n)
	if err := r.d.ReadFull(b); err != nil {
		return nil, fmt.Errorf("string body: %w", err)
	}
	return b, nil
}

// str reads a str value.
func (r *reader) str() (string, error) {
	c, err := r.peek()
	if err != nil {
		return "", err
	}
	if !msgpcode.IsString(c) {
		return "", fmt.Errorf("want string, got code 0x%02x", c)
	}
	b, err := r.blob()
	return string(b), err
}

// optStr reads a str value or nil (as "").
func (r *reader) optStr() (string, error) {
	if isNil, err := r.nextIsNil(); isNil || err != nil {
		return "", err
	}
	return r.str()
}

func isUintCode(c byte) bool {
	return c <= msgpcode.PosFixedNumHigh || (c >= msgpcode.Uint8 && c <= msgpcode.Uint64)
}

func isIntCode(c byte) bool {
	return c >= msgpcode.NegFixedNumLow || (c >= msgpcode.Int8 && c <= msgpcode.Int64)
}

// int64 reads any msgpack integer that fits in an int64.
func (r *reader) int64() (int64, error) {
	c, err := r.peek()
	if err != nil {
		return 0, err
	}
	switch {
	case isUintCode(c):
		u, err := r.d.DecodeUint64()
		if err != nil {
			return 0, fmt.Errorf("integer: %w", err)
		}
		if u > math.MaxInt64 {
			return 0, fmt.Errorf("integer %d out of range", u)
		}
		return int64(u), nil
	case isIntCode(c):
		v, err := r.d.DecodeInt64()
		if err != nil {
			return 0, fmt.Errorf("integer: %w", err)
		}
		return v, nil
	}
	return 0, fmt.Errorf("want integer, got code 0x%02x", c)
}

// optInt64 reads an integer or nil.
func (r *reader) optInt64() (*int64, error) {
	if isNil, err := r.nextIsNil(); isNil || err != nil {
		return nil, err
	}
	v, err := r.int64()
	if err != nil {
		return nil, err
	}
	return &v, nil
}

// float reads a float32, float64 or integer as float64.
func (r *reader) float() (float64, error) {
	c, err := r.peek()
	if err != nil {
		return 0, err
	}
	switch {
	case c == msgpcode.Float || c == msgpcode.Double:
		f, err := r.d.DecodeFloat64()
		if err != nil {
			return 0, fmt.Errorf("float: %w", err)
		}
		return f, nil
	case isUintCode(c):
		u, err := r.d.DecodeUint64()
		if err != nil {
			return 0, fmt.Errorf("float: %w", err)
		}
		return float64(u), nil
	case isIntCode(c):
		v, err := r.d.DecodeInt64()
		if err != nil {
			return 0, fmt.Errorf("float: %w", err)
		}
		return float64(v), nil
	}
	return 0, fmt.Errorf("want number, got code 0x%02x", c)
}

// hash reads a block hash: unsigned or signed integer, or bin.
func (r *reader) hash() (BlockHash, error) {
	c, err := r.peek()
	if err != nil {
		return BlockHash{}, err
	}
	switch {
	case isUintCode(c):
		u, err := r.d.DecodeUint64()
		if err != nil {
			return BlockHash{}, fmt.Errorf("hash: %w", err)
		}
		return IntHash(u), nil
	case isIntCode(c):
		v, err := r.d.DecodeInt64()
		if err != nil {
			return BlockHash{}, fmt.Errorf("hash: %w", err)
		}
		return IntHash(uint64(v)), nil // two's complement, as older vLLM meant it
	case msgpcode.IsBin(c):
		b, err := r.blob()
		if err != nil {
			return BlockHash{}, err
		}
		return bytesHashString(string(b)), nil
	}
	return BlockHash{}, fmt.Errorf("want integer or bin hash, got code 0x%02x", c)
}

// hashes reads an array of block hashes; empty or nil reads as nil.
func (r *reader) hashes() ([]BlockHash, error) {
	n, err := r.arrayLen()
	if err != nil || n == 0 {
		return nil, err
	}
	out := make([]BlockHash, n)
	for i := range out {
		if out[i], err = r.hash(); err != nil {
			return nil, fmt.Errorf("[%d]: %w", i, err)
		}
	}
	return out, nil
}

// skip skips one value of any type, nested at most maxDepth-depth deep.
func (r *reader) skip(depth int) error {
	if depth >= maxDepth {
		return fmt.Errorf("values nested deeper than %d", maxDepth)
	}
	c, err := r.peek()
	if err != nil {
		return err
	}
	switch {
	case msgpcode.IsFixedArray(c) || c == msgpcode.Array16 || c == msgpcode.Array32:
		n, err := r.arrayLen()
		if err != nil {
			return err
		}
		for range n {
			if err := r.skip(depth + 1); err != nil {
				return err
			}
		}
		return nil
	case msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32:
		n, err := r.mapLen()
		if err != nil {
			return err
		}
		for range 2 * n {
			if err := r.skip(depth + 1); err != nil {
				return err
			}
		}
		return nil
	case msgpcode.IsString(c) || msgpcode.IsBin(c):
		n, err := r.d.DecodeBytesLen()
		if err != nil {
			return fmt.Errorf("string header: %w", err)
		}
		return r.advance(n)
	case msgpcode.IsFixedExt(c) || msgpcode.IsExt(c):
		_, n, err := r.d.DecodeExtHeader()
		if err != nil {
			return fmt.Errorf("ext header: %w", err)
		}
		return r.advance(n)
	}
	if err := r.d.Skip(); err != nil { // scalars: at most 9 bytes
		return fmt.Errorf("skip code 0x%02x: %w", c, err)
	}
	return nil
}

func (r *reader) advance(n int) error {
	if n < 0 || n > r.remaining() {
		return fmt.Errorf("value of %d bytes in %d remaining bytes", n, r.remaining())
	}
	r.seek(r.offset() + n)
	return nil
}

// raw returns a copy of the encoding of the next value, or nil when it is nil.
func (r *reader) raw(depth int) ([]byte, error) {
	if isNil, err := r.nextIsNil(); isNil || err != nil {
		return nil, err
	}
	start := r.offset()
	if err := r.skip(depth); err != nil {
		return nil, err
	}
	return bytes.Clone(r.src[start:r.offset()]), nil
}

// validRaw reports whether b is exactly one well-formed msgpack value that
// DecodeBatch accepts as a field value.
func validRaw(b []byte) error {
	r := newReader(b)
	if err := r.skip(depthField); err != nil {
		return err
	}
	if r.remaining() != 0 {
		return fmt.Errorf("%d bytes after the value", r.remaining())
	}
	return nil
}
