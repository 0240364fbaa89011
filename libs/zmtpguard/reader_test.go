package zmtpguard

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"
	"testing/iotest"
)

// greeting is a valid ZMTP 3.0 greeting for the NULL mechanism.
func greeting() []byte { return nullGreeting() }

// frame encodes one frame as zmq4 sends it: a 1-byte size up to 255.
func frame(flags byte, body []byte) []byte {
	if len(body) > 255 {
		return append(binary.BigEndian.AppendUint64([]byte{flags | flagLong}, uint64(len(body))), body...)
	}
	return append([]byte{flags, byte(len(body))}, body...)
}

// header is a long frame header announcing size bytes.
func header(flags byte, size uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte{flags | flagLong}, size)
}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

var ready = frame(flagCommand, []byte("\x05READY\x0bSocket-Type\x00\x00\x00\x03PUB"))

func TestReader(t *testing.T) {
	small := Limits{MaxFrame: 300, MaxMessage: 700}
	big := bytes.Repeat([]byte{'x'}, 300)
	tests := []struct {
		name string
		in   []byte
		lim  Limits
		// wantErr is "" for a stream that passes, else the limit it breaks.
		wantErr string
	}{
		{"greeting only", greeting(), small, ""},
		{"handshake and messages", cat(greeting(), ready, frame(flagMore, []byte("topic")), frame(flagMore, make([]byte, 8)), frame(0, big)), small, ""},
		{"empty frames", cat(greeting(), ready, frame(flagMore, nil), frame(0, nil)), small, ""},
		{"messages under the limit, one after another", cat(greeting(), ready, frame(flagMore, big), frame(0, big), frame(flagMore, big), frame(0, big)), small, ""},
		{"4 GiB command before the handshake", cat(greeting(), header(flagCommand, 4<<30)), Limits{}, "frame"},
		{"1 TiB message after the handshake", cat(greeting(), ready, header(0, 1<<40)), Limits{}, "frame"},
		{"2^64-1", cat(greeting(), ready, header(0, ^uint64(0))), Limits{}, "frame"},
		{"short frame over a small limit", cat(greeting(), frame(0, big[:200])), Limits{MaxFrame: 100}, "frame"},
		{"frames within the limit, message over it", cat(greeting(), ready, frame(flagMore, big), frame(flagMore, big), frame(0, big)), small, "message"},
		{"empty frames count", cat(greeting(), ready, bytes.Repeat(frame(flagMore, nil), 22)), small, "message"},
	}
	for _, tc := range tests {
		for _, split := range []struct {
			name string
			wrap func(io.Reader) io.Reader
		}{{"whole", func(r io.Reader) io.Reader { return r }}, {"byte by byte", iotest.OneByteReader}} {
			t.Run(tc.name+"/"+split.name, func(t *testing.T) {
				g := NewReader(split.wrap(bytes.NewReader(tc.in)), tc.lim)
				out, err := io.ReadAll(g)
				if !bytes.Equal(out, tc.in[:len(out)]) {
					t.Fatalf("passed bytes differ from the stream")
				}
				if tc.wantErr == "" {
					if err != nil || len(out) != len(tc.in) {
						t.Fatalf("read %d of %d bytes, err %v; want all", len(out), len(tc.in), err)
					}
					return
				}
				var le *LimitError
				if !errors.As(err, &le) || !errors.Is(err, ErrTooLarge) || le.What != tc.wantErr {
					t.Fatalf("err = %v; want a %s LimitError", err, tc.wantErr)
				}
				// The caller must never hold the whole offending header.
				if len(out) >= len(tc.in) {
					t.Fatalf("all %d bytes passed before the error", len(out))
				}
				if _, again := g.Read(make([]byte, 1)); !errors.Is(again, ErrTooLarge) {
					t.Fatalf("read after the error: %v; want the same error", again)
				}
			})
		}
	}
}

func TestReaderStopsBeforeTheHeaderCompletes(t *testing.T) {
	in := cat(greeting(), ready, header(0, 1<<40))
	out, err := io.ReadAll(NewReader(iotest.OneByteReader(bytes.NewReader(in)), Limits{}))
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("err = %v; want ErrTooLarge", err)
	}
	if want := len(in) - 1; len(out) != want {
		t.Fatalf("passed %d bytes; want %d, all but the header's last", len(out), want)
	}
}

func TestLimitsWithDefaults(t *testing.T) {
	got := Limits{MaxFrame: 1}.WithDefaults()
	if got.MaxFrame != 1 || got.MaxMessage != DefaultMaxMessage || got.HandshakeTimeout != DefaultHandshakeTimeout {
		t.Fatalf("WithDefaults = %+v", got)
	}
}
