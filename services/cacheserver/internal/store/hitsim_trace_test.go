package store

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

// The traces the hit-ratio simulator replays (hitsim_test.go): generated
// from a fixed seed, so every run replays the same keys and the figures in
// docs/cacheserver.md can be asserted, or read from a recorded file.

// newRand is the traces' source: PCG's output is fixed by math/rand/v2, so
// a seed names one trace for good.
func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x5eed)) }

// zipfTrace is n reads of keys 0..keys-1, key k drawn with probability
// proportional to 1/(k+1)^s: a few keys hot, a long tail read rarely.
func zipfTrace(seed uint64, keys, n int, s float64) []string {
	z := rand.NewZipf(newRand(seed), s, 1, uint64(keys-1))
	trace := make([]string, n)
	for i := range trace {
		trace[i] = "z" + strconv.FormatUint(z.Uint64(), 10)
	}
	return trace
}

// scanTrace is zipfTrace over a hot set with, every period reads, a scan
// of scan keys read once and never again: one worker streaming a long
// document through the cache while the others reuse theirs.
func scanTrace(seed uint64, hot, n int, s float64, period, scan int) []string {
	z := rand.NewZipf(newRand(seed), s, 1, uint64(hot-1))
	trace := make([]string, 0, n+n/period*scan)
	for i := range n {
		if i > 0 && i%period == 0 {
			for j := range scan {
				trace = append(trace, fmt.Sprintf("scan-%d-%d", i, j))
			}
		}
		trace = append(trace, "h"+strconv.FormatUint(z.Uint64(), 10))
	}
	return trace
}

// chunkTrace is LMCache's use of the cache: each request reads one
// document's chain of KV chunks from the start, the document drawn with
// Zipf popularity (s), then the chunks of its own question, which no
// request reads again. Keys are LMCache's, model@world_size@worker@chained
// chunk hash@dtype, one per tensor-parallel worker (2).
func chunkTrace(seed uint64, docs, requests int, s float64) []string {
	r := newRand(seed)
	z := rand.NewZipf(r, s, 1, uint64(docs-1))
	chains := make([][]string, docs)
	for d := range chains {
		chains[d] = chunkChain(fmt.Sprint("doc-", d), 2+r.IntN(31)) // 2..32 chunks
	}
	const workers = 2
	var trace []string
	emit := func(hashes []string) {
		for _, h := range hashes {
			for w := range workers {
				trace = append(trace, fmt.Sprintf("Qwen/Qwen3-8B@%d@%d@%s@bfloat16", workers, w, h))
			}
		}
	}
	for q := range requests {
		chain := chains[z.Uint64()]
		emit(chain)
		// The question: chained after the document, so unique to this
		// request (1 or 2 chunks of 256 tokens).
		emit(chunkChain(chain[len(chain)-1]+fmt.Sprint("/q-", q), 1+r.IntN(2)))
	}
	return trace
}

// chunkChain is n chunk hashes, each over the one before it, as LMCache
// chains a prefix's chunks.
func chunkChain(prefix string, n int) []string {
	hashes := make([]string, n)
	prev := prefix
	for i := range hashes {
		sum := sha256.Sum256([]byte(prev + "/" + strconv.Itoa(i)))
		prev = hex.EncodeToString(sum[:])
		hashes[i] = prev
	}
	return hashes
}

// parseTrace reads a recorded trace: one key per line, in the order it was
// read; blank lines and lines starting with # are skipped, and surrounding
// spaces trimmed.
func parseTrace(r io.Reader) ([]string, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), MaxKeyBytes+2) // a key, its newline and a \r
	var trace []string
	for line := 1; sc.Scan(); line++ {
		key := strings.TrimSpace(sc.Text())
		if key == "" || strings.HasPrefix(key, "#") {
			continue
		}
		if len(key) > MaxKeyBytes {
			return nil, fmt.Errorf("trace line %d: key of %d bytes exceeds %d", line, len(key), MaxKeyBytes)
		}
		trace = append(trace, key)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading trace: %w", err)
	}
	return trace, nil
}

func TestParseTrace(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []string
		wantErr bool
	}{
		{name: "keys in order", in: "a\nb\na\n", want: []string{"a", "b", "a"}},
		{name: "comments, blanks and spaces", in: "# recorded 2026\n\n  a \r\nb", want: []string{"a", "b"}},
		{name: "empty", in: ""},
		{name: "key too long", in: strings.Repeat("k", MaxKeyBytes+1), wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseTrace(strings.NewReader(tt.in))
			if (err != nil) != tt.wantErr {
				t.Fatalf("err %v, want an error: %v", err, tt.wantErr)
			}
			if strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
		})
	}
}

// TestTracesDeterministic: a seed names one trace, so the asserted figures
// hold on every run.
func TestTracesDeterministic(t *testing.T) {
	gens := map[string]func() []string{
		"zipf":   func() []string { return zipfTrace(1, 1000, 5000, 1.1) },
		"scan":   func() []string { return scanTrace(2, 1000, 5000, 1.1, 1000, 500) },
		"chunks": func() []string { return chunkTrace(3, 50, 200, 1.2) },
	}
	for name, gen := range gens {
		a, b := gen(), gen()
		if strings.Join(a, "\n") != strings.Join(b, "\n") {
			t.Errorf("%s: two traces from one seed differ", name)
		}
	}
}
