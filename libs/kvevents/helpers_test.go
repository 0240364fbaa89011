package kvevents

import (
	"bytes"
	"math"
	"reflect"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// mp builds msgpack by hand with msgpack's low-level encoder, the way a test
// writes down what Python's msgspec emits.
type mp struct {
	buf bytes.Buffer
	e   *msgpack.Encoder
}

func newMP() *mp {
	m := &mp{}
	m.e = msgpack.NewEncoder(&m.buf)
	return m
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}

func (m *mp) arr(n int) *mp        { must(m.e.EncodeArrayLen(n)); return m }
func (m *mp) mapn(n int) *mp       { must(m.e.EncodeMapLen(n)); return m }
func (m *mp) s(v string) *mp       { must(m.e.EncodeString(v)); return m }
func (m *mp) u(v uint64) *mp       { must(m.e.EncodeUint(v)); return m }
func (m *mp) i(v int64) *mp        { must(m.e.EncodeInt(v)); return m }
func (m *mp) f(v float64) *mp      { must(m.e.EncodeFloat64(v)); return m }
func (m *mp) f32(v float32) *mp    { must(m.e.EncodeFloat32(v)); return m }
func (m *mp) null() *mp            { must(m.e.EncodeNil()); return m }
func (m *mp) bin(b []byte) *mp     { must(m.e.EncodeBytes(b)); return m }
func (m *mp) raw(b []byte) *mp     { m.buf.Write(b); return m }
func (m *mp) i64code(v int64) *mp  { must(m.e.EncodeInt64(v)); return m }  // always 0xd3
func (m *mp) u64code(v uint64) *mp { must(m.e.EncodeUint64(v)); return m } // always 0xcf

// tokens writes an array of token ids.
func (m *mp) tokens(ts ...uint64) *mp {
	m.arr(len(ts))
	for _, t := range ts {
		m.u(t)
	}
	return m
}

func (m *mp) bytes() []byte { return bytes.Clone(m.buf.Bytes()) }

func i64(v int64) *int64 { return &v }

func hp(h BlockHash) *BlockHash { return &h }

func seqTokens(start, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(start + i)
	}
	return out
}

// batchEqual compares batches, treating a NaN timestamp as equal to itself
// when the bits match.
func batchEqual(a, b Batch) bool {
	if math.Float64bits(a.TS) != math.Float64bits(b.TS) {
		return false
	}
	a.TS, b.TS = 0, 0
	return reflect.DeepEqual(a, b)
}

func mustEncode(t testing.TB, b Batch, enc Encoding) []byte {
	t.Helper()
	p, err := EncodeBatch(b, enc)
	if err != nil {
		t.Fatalf("EncodeBatch(%v): %v", enc, err)
	}
	return p
}
