package lmproto

import (
	"bytes"
	"errors"
	"io"
	"math"
	"runtime"
	"strings"
	"testing"
)

// allocated returns the bytes f allocated on the heap: the least of five
// runs, since TotalAlloc counts every goroutine of the process (another
// package's leftovers, the race detector's runtime) and that noise only
// adds. f must be repeatable.
func allocated(f func()) uint64 {
	least := uint64(math.MaxUint64)
	for range 5 {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		f()
		runtime.ReadMemStats(&after)
		least = min(least, after.TotalAlloc-before.TotalAlloc)
	}
	return least
}

// TestReadValueAllocatesAsBytesArrive: a value's buffer grows with what
// arrives, so a peer announcing 256 MiB and sending little costs little.
func TestReadValueAllocatesAsBytesArrive(t *testing.T) {
	tests := []struct {
		name            string
		announced, sent int
		maxAlloc        uint64
		wantErr         error
	}{
		{"header only", 256 << 20, 0, 5 << 20, io.ErrUnexpectedEOF},
		{"a trickle", 256 << 20, 10, 5 << 20, io.ErrUnexpectedEOF},
		{"3 MiB of 256", 256 << 20, 3 << 20, 5 << 20, io.ErrUnexpectedEOF},
		{"5 MiB of 256", 256 << 20, 5 << 20, 40 << 20, io.ErrUnexpectedEOF},
		{"small, whole", 100, 100, 4 << 10, nil},
		{"4 MiB, whole, one allocation", 4 << 20, 4 << 20, 4<<20 + 4<<10, nil},
		{"5 MiB, whole", 5 << 20, 5 << 20, 10 << 20, nil},
		{"empty", 0, 0, 1 << 10, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := bytes.Repeat([]byte{7}, tt.sent)
			var got []byte
			var err error
			n := allocated(func() { got, err = ReadValue(bytes.NewReader(src), tt.announced) })
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if n > tt.maxAlloc {
				t.Fatalf("allocated %d bytes for %d received of %d announced; want at most %d", n, tt.sent, tt.announced, tt.maxAlloc)
			}
			if len(got) != tt.sent || !bytes.Equal(got, src) {
				t.Fatalf("read %d bytes, want the %d sent", len(got), tt.sent)
			}
			if err == nil && cap(got) != tt.announced {
				t.Fatalf("cap %d, want exactly %d: the store keeps this slice", cap(got), tt.announced)
			}
		})
	}
}

// TestReaderPutAllocation: Next reads a PUT's value through ReadValue.
func TestReaderPutAllocation(t *testing.T) {
	h, err := AppendRequest(nil, &RequestHeader{Command: CmdPut, Meta: Meta{Length: 256 << 20}, Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	in := string(h) + strings.Repeat("x", 1000)
	n := allocated(func() { _, err = NewReader(strings.NewReader(in), 256<<20).Next() })
	if !errors.Is(err, ErrProtocol) {
		t.Fatalf("err = %v, want a protocol error", err)
	}
	if n > 5<<20 {
		t.Fatalf("a truncated 256 MiB PUT allocated %d bytes", n)
	}
}
