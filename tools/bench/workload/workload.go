// Package workload generates the request sequences warmpath's benchmarks
// and demo replay — shared-prefix groups, multi-round chats, long documents
// with follow-up questions, and Mooncake-format traces — deterministically
// for a seed, with the knobs the published benchmarks name
// (docs/benchmarks.md, "Workloads").
//
// Prompts are token ids of common English words, each one token with its
// leading space in the simulator's tokenizer (tokenize.Tokenizer.Words), so
// the live mode can send them as text that tokenizes back to exactly the
// generated ids, and the discrete-event mode can use the ids directly.
// Prompts are built from shared Parts (a system prompt, a document, a trace
// block) that are never copied, so a long trace stays small in memory.
package workload

import (
	"math/rand/v2"
	"time"
)

// Request is one request of a workload.
type Request struct {
	// Arrival is when the request is sent, from the start of the run. A
	// request with After ≥ 0 is sent Think after request After finishes
	// instead (the next round of a conversation); its Arrival is then only
	// the earliest time it could be sent, for ordering.
	Arrival time.Duration
	After   int
	Think   time.Duration
	// Session identifies the user or conversation (the x-user-id header).
	Session string
	// Parts are the prompt's token ids, in pieces shared between requests.
	// For a chat request each part is one message, with its role in Roles.
	Parts [][]uint32
	Chat  bool
	Roles []string
	// MaxTokens is the output length.
	MaxTokens int
}

// PromptTokens is the prompt's length (for chat, the messages' contents,
// without the template's tokens).
func (r *Request) PromptTokens() int {
	n := 0
	for _, p := range r.Parts {
		n += len(p)
	}
	return n
}

// Tokens returns the prompt's ids as one fresh slice (for chat, the
// messages' contents concatenated, without the template's tokens).
func (r *Request) Tokens() []uint32 {
	out := make([]uint32, 0, r.PromptTokens())
	for _, p := range r.Parts {
		out = append(out, p...)
	}
	return out
}

// vocab draws deterministic word-token sequences.
type vocab struct {
	words []uint32
	rng   *rand.Rand
}

func newVocab(words []uint32, seed uint64, stream uint64) *vocab {
	return &vocab{words: words, rng: rand.New(rand.NewPCG(seed, stream))}
}

func (v *vocab) text(n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = v.words[v.rng.IntN(len(v.words))]
	}
	return out
}

// poisson returns the arrival offsets of n requests at rate per second
// (all at 0 when rate ≤ 0).
func poisson(rng *rand.Rand, n int, rate float64) []time.Duration {
	out := make([]time.Duration, n)
	if rate <= 0 {
		return out
	}
	var t float64
	for i := range out {
		t += rng.ExpFloat64() / rate
		out[i] = time.Duration(t * float64(time.Second))
	}
	return out
}
