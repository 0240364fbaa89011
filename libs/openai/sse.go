package openai

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
)

// DoneData is the payload of the event that ends an OpenAI stream.
const DoneData = "[DONE]"

// SSEWriter writes Server-Sent Events and flushes each one, so a client (or
// a proxy in front) sees every token as soon as it exists.
type SSEWriter struct {
	w io.Writer
	f http.Flusher
}

// NewSSEWriter sets the event-stream headers on w and returns a writer for
// it. It must be called before anything is written to w.
func NewSSEWriter(w http.ResponseWriter) *SSEWriter {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	f, _ := w.(http.Flusher)
	return &SSEWriter{w: w, f: f}
}

// WriteData writes one `data: <payload>\n\n` event and flushes it.
func (s *SSEWriter) WriteData(payload []byte) error {
	buf := make([]byte, 0, len(payload)+8)
	buf = append(buf, "data: "...)
	buf = append(buf, payload...)
	buf = append(buf, '\n', '\n')
	if _, err := s.w.Write(buf); err != nil {
		return fmt.Errorf("sse: write event: %w", err)
	}
	if s.f != nil {
		s.f.Flush()
	}
	return nil
}

// WriteDone writes the terminating `data: [DONE]` event.
func (s *SSEWriter) WriteDone() error { return s.WriteData([]byte(DoneData)) }

// MaxEventSize bounds one event's data; longer events are a protocol error
// rather than unbounded memory growth.
const MaxEventSize = 4 << 20

// ErrEventTooLarge is returned by SSEReader.Next for events over MaxEventSize.
var ErrEventTooLarge = errors.New("sse: event exceeds maximum size")

// SSEReader reads the data of Server-Sent Events from a stream. It follows
// the WHATWG event-stream rules that matter for OpenAI streams: `data:`
// lines (one optional space after the colon) accumulate, joined by "\n",
// until a blank line; comment lines (":") and other fields are ignored; CR,
// LF and CRLF line endings are all accepted.
type SSEReader struct {
	r   *bufio.Reader
	buf bytes.Buffer
}

// NewSSEReader returns a reader of events from r.
func NewSSEReader(r io.Reader) *SSEReader {
	return &SSEReader{r: bufio.NewReaderSize(r, 32<<10)}
}

// Next returns the data of the next event. It returns io.EOF when the stream
// ends cleanly between events; an event cut off by EOF is returned if it has
// data. The returned slice is valid until the next call.
func (s *SSEReader) Next() ([]byte, error) {
	s.buf.Reset()
	hasData := false
	for {
		line, err := s.readLine()
		if err != nil {
			if errors.Is(err, io.EOF) && hasData {
				return s.buf.Bytes(), nil
			}
			return nil, err
		}
		if len(line) == 0 {
			if hasData {
				return s.buf.Bytes(), nil
			}
			continue
		}
		if line[0] == ':' {
			continue
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		if string(field) != "data" {
			continue
		}
		value = bytes.TrimPrefix(value, []byte(" "))
		if hasData {
			s.buf.WriteByte('\n')
		}
		if s.buf.Len()+len(value) > MaxEventSize {
			return nil, ErrEventTooLarge
		}
		s.buf.Write(value)
		hasData = true
	}
}

// readLine returns one line without its terminator (CR, LF or CRLF).
func (s *SSEReader) readLine() ([]byte, error) {
	var line []byte
	for {
		b, err := s.r.ReadByte()
		if err != nil {
			if errors.Is(err, io.EOF) && len(line) > 0 {
				return line, nil
			}
			return nil, err
		}
		switch b {
		case '\n':
			return line, nil
		case '\r':
			if next, err := s.r.Peek(1); err == nil && next[0] == '\n' {
				_, _ = s.r.ReadByte()
			}
			return line, nil
		}
		if len(line) >= MaxEventSize {
			return nil, ErrEventTooLarge
		}
		line = append(line, b)
	}
}
