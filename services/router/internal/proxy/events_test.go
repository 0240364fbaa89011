package proxy

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"testing/iotest"
)

// chunks reads data in pieces whose sizes cuts gives (cycled), then fails
// with end.
type chunks struct {
	data []byte
	cuts []byte
	i    int
	end  error
}

func (c *chunks) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, c.end
	}
	n := len(c.data)
	if len(c.cuts) > 0 {
		n = min(n, int(c.cuts[c.i%len(c.cuts)])+1)
		c.i++
	}
	n = copy(p, c.data[:n])
	c.data = c.data[n:]
	return n, nil
}

func TestEventCutter(t *testing.T) {
	errBroke := errors.New("connection reset")
	tests := []struct {
		name      string
		body      string
		cuts      []byte
		end       error
		size      int
		want      string
		wantClean bool
	}{
		{"whole events, then EOF", "data: 1\n\ndata: 2\n\n", nil, io.EOF, 64, "data: 1\n\ndata: 2\n\n", true},
		{"a tail without its blank line, then EOF", "data: 1\n\ndata: 2", []byte{3}, io.EOF, 64, "data: 1\n\ndata: 2", false},
		{"broken within an event", "data: 1\n\ndata: {\"te", []byte{0, 5, 2}, errBroke, 64, "data: 1\n\n", true},
		{"broken between events", "data: 1\n\ndata: 2\n\n", []byte{1}, errBroke, 64, "data: 1\n\ndata: 2\n\n", true},
		{"CRLF events", "data: 1\r\n\r\ndata: 2\r\n", []byte{4}, errBroke, 64, "data: 1\r\n\r\n", true},
		{"an event over the buffer is passed on", "data: " + string(bytes.Repeat([]byte("x"), 40)) + "\n\ndata: 2", nil, errBroke, 16, "data: " + string(bytes.Repeat([]byte("x"), 40)) + "\n\n", true},
		{"broken inside an event over the buffer", "data: 1\n\ndata: " + string(bytes.Repeat([]byte("x"), 40)), []byte{7}, errBroke, 16, "data: 1\n\ndata: " + string(bytes.Repeat([]byte("x"), 26)), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEventCutter(&chunks{data: []byte(tt.body), cuts: tt.cuts, end: tt.end}, make([]byte, 0, tt.size))
			got, err := io.ReadAll(iotest.OneByteReader(e))
			if tt.end == io.EOF && err != nil || tt.end != io.EOF && !errors.Is(err, tt.end) {
				t.Fatalf("error %v, want %v", err, tt.end)
			}
			if string(got) != tt.want || e.Clean() != tt.wantClean {
				t.Fatalf("got %q (clean %v), want %q (clean %v)", got, e.Clean(), tt.want, tt.wantClean)
			}
		})
	}
}

// FuzzEventCutter: whatever the bytes and however they arrive, the cutter
// returns the body unchanged up to its end on io.EOF, and, when it breaks,
// a prefix of it that ends at an event boundary whenever Clean says so.
func FuzzEventCutter(f *testing.F) {
	f.Add([]byte("data: 1\n\ndata: 2\n\n"), []byte{3, 0, 9}, uint8(16), false)
	f.Add([]byte("data: {\"a\":1}\r\n\r\ndata: [DONE]"), []byte{1}, uint8(8), true)
	f.Fuzz(func(t *testing.T, body, cuts []byte, size uint8, eof bool) {
		end := errors.New("broken")
		if eof {
			end = io.EOF
		}
		buf := make([]byte, 0, int(size)+1)
		e := newEventCutter(&chunks{data: body, cuts: cuts, end: end}, buf)
		got, err := io.ReadAll(e)
		switch {
		case eof && (err != nil || !bytes.Equal(got, body)):
			t.Fatalf("after io.EOF: %q, %v; want the whole body %q", got, err, body)
		case !eof && !errors.Is(err, end):
			t.Fatalf("error %v, want %v", err, end)
		case !bytes.HasPrefix(body, got):
			t.Fatalf("returned %q, not a prefix of %q", got, body)
		case !eof && e.Clean() && len(got) > 0 && eventEnd(got) != len(got):
			t.Fatalf("clean, but %q does not end at an event boundary", got)
		case !eof && !e.Clean() && longestEvent(got) < cap(buf)-1:
			t.Fatalf("not clean after %q, though no event there outgrew the %d-byte buffer", got, cap(buf))
		}
	})
}

// longestEvent is the longest run of b with no event boundary inside.
func longestEvent(b []byte) int {
	longest, start := 0, 0
	for i := range b {
		if end := eventEnd(b[:i+1]); end > start {
			longest, start = max(longest, i-start), end
		}
	}
	return max(longest, len(b)-start)
}
