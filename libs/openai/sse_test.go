package openai

import (
	"errors"
	"io"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
)

func readAll(t testing.TB, r io.Reader) ([]string, error) {
	t.Helper()
	rd := NewSSEReader(r)
	var out []string
	for {
		ev, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, string(ev))
	}
}

func TestSSEReader(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []string
	}{
		{name: "openai stream", in: "data: {\"a\":1}\n\ndata: [DONE]\n\n", want: []string{`{"a":1}`, "[DONE]"}},
		{name: "crlf", in: "data: x\r\n\r\ndata: y\r\n\r\n", want: []string{"x", "y"}},
		{name: "cr only", in: "data: x\r\rdata: y\r\r", want: []string{"x", "y"}},
		{name: "comments and fields", in: ": ping\nevent: message\nid: 3\ndata: x\n\n", want: []string{"x"}},
		{name: "multi-line data", in: "data: a\ndata: b\n\n", want: []string{"a\nb"}},
		{name: "no space", in: "data:x\n\n", want: []string{"x"}},
		{name: "unterminated last event", in: "data: x\n\ndata: y", want: []string{"x", "y"}},
		{name: "blank lines only", in: "\n\n\n", want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := readAll(t, strings.NewReader(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
			// Any chunking of the input gives the same events.
			got, err = readAll(t, iotest.OneByteReader(strings.NewReader(tt.in)))
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("one-byte reads: got %q (%v), want %q", got, err, tt.want)
			}
		})
	}
}

func TestSSEReaderTooLarge(t *testing.T) {
	in := "data: " + strings.Repeat("x", MaxEventSize+1) + "\n\n"
	_, err := readAll(t, strings.NewReader(in))
	if !errors.Is(err, ErrEventTooLarge) {
		t.Fatalf("got %v, want ErrEventTooLarge", err)
	}
}

func TestSSEWriterRoundTrip(t *testing.T) {
	rec := httptest.NewRecorder()
	w := NewSSEWriter(rec)
	for _, ev := range []string{`{"x":1}`, `{"y":2}`} {
		if err := w.WriteData([]byte(ev)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.WriteDone(); err != nil {
		t.Fatal(err)
	}
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("Content-Type = %q, want text/event-stream", ct)
	}
	if !rec.Flushed {
		t.Fatal("events were not flushed")
	}
	got, err := readAll(t, rec.Body)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{`{"x":1}`, `{"y":2}`, DoneData}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func FuzzSSEReader(f *testing.F) {
	for _, s := range []string{"data: x\n\n", "data: a\r\ndata: b\r\n\r\n", ": c\n\ndata:\n\n", "data: [DONE]\n\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		whole, errWhole := readAll(t, strings.NewReader(in))
		split, errSplit := readAll(t, iotest.OneByteReader(strings.NewReader(in)))
		if (errWhole == nil) != (errSplit == nil) || !reflect.DeepEqual(whole, split) {
			t.Fatalf("chunking changed the result: %q (%v) vs %q (%v)", whole, errWhole, split, errSplit)
		}
	})
}
