package kvevents

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// FuzzDecodeBatch checks that DecodeBatch never panics, that every error
// wraps ErrMalformed, and that whatever decodes re-encodes in both encodings
// and decodes to the same batch.
func FuzzDecodeBatch(f *testing.F) {
	files, err := filepath.Glob(filepath.Join("testdata", "payloads", "*.msgpack"))
	if err != nil {
		f.Fatal(err)
	}
	if len(files) == 0 {
		f.Fatal("no seed payloads in testdata/payloads")
	}
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, b := range roundTripBatches() {
		f.Add(mustEncode(f, b, Positional))
		f.Add(mustEncode(f, b, MapEncoding))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := DecodeBatch(data)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		for _, enc := range []Encoding{Positional, MapEncoding} {
			payload, err := EncodeBatch(b, enc)
			if err != nil {
				t.Fatalf("EncodeBatch(%v) of a decoded batch: %v", enc, err)
			}
			again, err := DecodeBatch(payload)
			if err != nil {
				t.Fatalf("DecodeBatch of re-encoded (%v) %x: %v", enc, payload, err)
			}
			if !batchEqual(again, b) {
				t.Fatalf("%v round trip: got %+v, want %+v", enc, again, b)
			}
		}
	})
}

// FuzzParseMessage checks that ParseMessage and the replay parser never
// panic and that a parsed message re-frames to the same frames.
func FuzzParseMessage(f *testing.F) {
	f.Add(uint8(3), []byte("kv@pod@model"), []byte{0, 0, 0, 0, 0, 0, 0, 1}, []byte{0x92, 0xcb})
	f.Add(uint8(3), []byte{}, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, []byte{})
	f.Add(uint8(2), []byte{}, []byte{0, 0, 0, 0, 0, 0, 0, 1}, []byte{1})
	f.Add(uint8(4), []byte{}, []byte("t"), []byte{0, 0, 0, 0, 0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, n uint8, a, b, c []byte) {
		frames := [][]byte{a, b, c, c}[:n%5]
		m, err := ParseMessage(frames)
		if err == nil {
			again, err := ParseMessage(m.Frames())
			if err != nil {
				t.Fatalf("ParseMessage of re-framed %+v: %v", m, err)
			}
			if !reflect.DeepEqual(again, m) {
				t.Fatalf("got %+v, want %+v", again, m)
			}
		} else if !errors.Is(err, ErrFrames) {
			t.Fatalf("error %v does not wrap ErrFrames", err)
		}
		if _, _, err := ParseReplayReply(frames); err != nil && !errors.Is(err, ErrFrames) {
			t.Fatalf("replay error %v does not wrap ErrFrames", err)
		}
	})
}
