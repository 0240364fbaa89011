package lmproto

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// TestReserveFollowsArrivingBytes: a PUT's memory is reserved as its bytes
// arrive, never the announced length up front. A
// peer that announced 256 MiB and sent 64 KiB held a 256 MiB reservation,
// which emptied the memory tier and stalled every other writer.
func TestReserveFollowsArrivingBytes(t *testing.T) {
	cases := []struct {
		name              string
		announced, sent   int
		wantMax, wantDone int // most reserved; reserved once the value is whole (0: it never is)
	}{
		{"stalled large PUT", 48 << 20, 64 << 10, 64<<10 + reserveStep, 0},
		{"whole 4 MiB PUT", 4 << 20, 4 << 20, 4 << 20, 4 << 20},
		{"whole 40 MiB PUT", 40 << 20, 40 << 20, 40 << 20, 40 << 20},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			hdr, err := AppendRequest(nil, &RequestHeader{Command: CmdPut, Key: "k", Meta: Meta{Length: int32(c.announced)}})
			if err != nil {
				t.Fatal(err)
			}
			in := io.MultiReader(bytes.NewReader(hdr), bytes.NewReader(make([]byte, c.sent)))
			rd := NewReader(in, 64<<20)
			reserved := 0
			rd.SetReserve(func(n int) error { reserved += n; return nil })
			req, err := rd.Next()
			if c.wantDone == 0 {
				if !errors.Is(err, ErrProtocol) {
					t.Fatalf("a truncated PUT: %v, want a protocol error", err)
				}
				if reserved > c.wantMax {
					t.Errorf("reserved %d bytes for a PUT that sent %d, want at most %d", reserved, c.sent, c.wantMax)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(req.Value) != c.sent || reserved != c.wantDone {
				t.Errorf("value of %d bytes with %d reserved, want %d and %d", len(req.Value), reserved, c.sent, c.wantDone)
			}
		})
	}
}
