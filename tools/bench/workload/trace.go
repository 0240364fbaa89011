package workload

import (
	"bufio"
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
)

// TraceBlockTokens is the tokens one Mooncake hash id stands for.
const TraceBlockTokens = 512

// maxTraceLine bounds one JSONL line: 1 MiB holds over 100,000 hash ids,
// a prompt of 50 M tokens.
const maxTraceLine = 1 << 20

// ShippedTraceName names the synthetic Mooncake trace embedded in this
// package (traces/README.md has its source and licence).
const ShippedTraceName = "mooncake_synthetic_trace"

//go:embed traces/mooncake_synthetic_trace.jsonl
var shippedTrace []byte

// ShippedTrace returns the records of the embedded synthetic Mooncake trace,
// so a benchmark replays it from any working directory.
func ShippedTrace() ([]TraceRecord, error) {
	recs, err := ReadTrace(bytes.NewReader(shippedTrace))
	if err != nil {
		return nil, fmt.Errorf("shipped trace %s: %w", ShippedTraceName, err)
	}
	return recs, nil
}

// TraceRecord is one line of a Mooncake-format trace.
type TraceRecord struct {
	Timestamp    int64   `json:"timestamp"` // ms from the trace's start
	InputLength  int     `json:"input_length"`
	OutputLength int     `json:"output_length"`
	HashIDs      []int64 `json:"hash_ids"`
}

// ReadTrace reads a Mooncake-format JSONL trace. A line that is not such a
// record — bad JSON, a negative or missing length, more hash ids than the
// input needs or too few to cover it, a timestamp earlier than the line
// before (arrivals must be in order to be replayed) — is an error naming
// the line. Blank lines are skipped.
func ReadTrace(r io.Reader) ([]TraceRecord, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxTraceLine)
	var out []TraceRecord
	line := 0
	var last int64
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		var rec TraceRecord
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&rec); err != nil {
			return nil, fmt.Errorf("workload: trace line %d: %w", line, err)
		}
		if dec.More() {
			return nil, fmt.Errorf("workload: trace line %d: more than one JSON value", line)
		}
		if err := rec.check(); err != nil {
			return nil, fmt.Errorf("workload: trace line %d: %w", line, err)
		}
		if rec.Timestamp < last {
			return nil, fmt.Errorf("workload: trace line %d: timestamp %d before the previous line's %d", line, rec.Timestamp, last)
		}
		last = rec.Timestamp
		out = append(out, rec)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("workload: trace line %d: longer than %d bytes", line+1, maxTraceLine)
		}
		return nil, fmt.Errorf("workload: trace: %w", err)
	}
	return out, nil
}

func (r TraceRecord) check() error {
	switch {
	case r.Timestamp < 0:
		return fmt.Errorf("negative timestamp %d", r.Timestamp)
	case r.InputLength < 1:
		return fmt.Errorf("input_length %d, want ≥ 1", r.InputLength)
	case r.OutputLength < 1:
		return fmt.Errorf("output_length %d, want ≥ 1", r.OutputLength)
	}
	need := (r.InputLength + TraceBlockTokens - 1) / TraceBlockTokens
	if len(r.HashIDs) != need {
		return fmt.Errorf("%d hash ids for input_length %d, want %d (one per %d tokens)", len(r.HashIDs), r.InputLength, need, TraceBlockTokens)
	}
	for _, id := range r.HashIDs {
		if id < 0 {
			return fmt.Errorf("negative hash id %d", id)
		}
	}
	return nil
}

// Trace replays records: each hash id becomes a fixed random 512-token
// block (the same for every request naming it, given the seed), a
// request's last block is cut to its input_length, and arrivals follow the
// timestamps divided by Speedup (1 when 0). Max, when > 0, keeps the first
// Max requests.
type Trace struct {
	Speedup float64
	Max     int
	Seed    uint64
}

// Generate builds the requests for records.
func (w Trace) Generate(records []TraceRecord, words []uint32) ([]Request, error) {
	if len(words) == 0 {
		return nil, errors.New("workload: trace needs words")
	}
	speed := w.Speedup
	if speed <= 0 {
		speed = 1
	}
	if w.Max > 0 && len(records) > w.Max {
		records = records[:w.Max]
	}
	blocks := map[int64][]uint32{}
	block := func(id int64) []uint32 {
		b, ok := blocks[id]
		if !ok {
			// One stream per id: its block does not depend on which
			// requests came first.
			b = newVocab(words, w.Seed, uint64(id)+1<<32).text(TraceBlockTokens)
			blocks[id] = b
		}
		return b
	}
	out := make([]Request, len(records))
	for i, rec := range records {
		parts := make([][]uint32, len(rec.HashIDs))
		for j, id := range rec.HashIDs {
			parts[j] = block(id)
		}
		if tail := rec.InputLength - (len(parts)-1)*TraceBlockTokens; tail < TraceBlockTokens {
			parts[len(parts)-1] = parts[len(parts)-1][:tail:tail]
		}
		out[i] = Request{
			Arrival: time.Duration(float64(rec.Timestamp) / speed * float64(time.Millisecond)),
			After:   -1, Session: fmt.Sprintf("trace-%d", rec.HashIDs[0]),
			Parts: parts, MaxTokens: rec.OutputLength,
		}
	}
	return out, nil
}
