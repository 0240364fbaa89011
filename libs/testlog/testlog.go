// Package testlog is for tests that check what a program logs: a slog
// logger writing JSON lines the test reads back, and the parsing of a
// process's JSON log (the router's --log-format json).
package testlog

import (
	"bufio"
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
)

// Line is one JSON log line, keys as logged (msg, level, time, and the
// attributes).
type Line map[string]any

// Msg is the line's message.
func (l Line) Msg() string { return l.String(slog.MessageKey) }

// Level is the line's level: DEBUG, INFO, WARN or ERROR.
func (l Line) Level() string { return l.String(slog.LevelKey) }

// String is the string at key; "" when absent or not a string.
func (l Line) String(key string) string {
	s, _ := l[key].(string)
	return s
}

// Number is the number at key; ok is false when absent or not a number.
func (l Line) Number(key string) (v float64, ok bool) {
	v, ok = l[key].(float64)
	return v, ok
}

// Parse reads JSON log lines from text, skipping lines that are not JSON
// objects (a process's other output).
func Parse(text string) []Line {
	var out []Line
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l Line
		if b := bytes.TrimSpace(sc.Bytes()); len(b) > 0 && b[0] == '{' && json.Unmarshal(b, &l) == nil {
			out = append(out, l)
		}
	}
	return out
}

// WithMsg returns the lines whose message is msg.
func WithMsg(lines []Line, msg string) []Line {
	var out []Line
	for _, l := range lines {
		if l.Msg() == msg {
			out = append(out, l)
		}
	}
	return out
}

// Recorder keeps what a logger from New wrote; safe for concurrent use.
type Recorder struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// New returns a JSON logger at level and the Recorder it writes to.
func New(level slog.Level) (*slog.Logger, *Recorder) {
	r := &Recorder{}
	return slog.New(slog.NewJSONHandler(r, &slog.HandlerOptions{Level: level})), r
}

func (r *Recorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.buf.Write(p)
}

// Lines parses everything logged so far.
func (r *Recorder) Lines() []Line {
	r.mu.Lock()
	defer r.mu.Unlock()
	return Parse(r.buf.String())
}
