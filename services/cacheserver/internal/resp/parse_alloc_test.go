package resp

import (
	"bufio"
	"bytes"
	"fmt"
	"runtime"
	"testing"
)

// TestBulkReadAllocatesOnce: a SET of a 4 MiB value (LMCache's typical
// chunk) is read into one buffer of the value's size. Reading the value and
// its CRLF as one length made the reader's 4 MiB first step two bytes short,
// so every such SET allocated and copied the value a second time.
func TestBulkReadAllocatesOnce(t *testing.T) {
	for _, size := range []int{4 << 20, 4<<20 - 2, 4<<20 + 1} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			value := bytes.Repeat([]byte{'v'}, size)
			cmd := fmt.Appendf(nil, "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$%d\r\n%s\r\n", size, value)
			rd := NewReader(bufio.NewReaderSize(bytes.NewReader(cmd), 64<<10), Limits{MaxArgs: 16, MaxArgBytes: 64 << 20})
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			args, err := rd.Next()
			runtime.ReadMemStats(&after)
			if err != nil {
				t.Fatal(err)
			}
			if got := args[2]; !bytes.Equal(got, value) || cap(got) != size {
				t.Fatalf("value of %d bytes (cap %d), want the %d sent with cap %d", len(got), cap(got), size, size)
			}
			// One value's worth, and for a value past the first 4 MiB step
			// the grown buffer too; never the value twice plus change.
			limit := uint64(size) + 64<<10
			if size > 4<<20 {
				limit += 4 << 20
			}
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > limit {
				t.Errorf("reading one SET of %d bytes allocated %d bytes, want at most %d", size, alloc, limit)
			}
		})
	}
}
