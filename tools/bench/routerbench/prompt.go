package routerbench

import (
	"errors"
	"math/rand/v2"
	"strings"

	"github.com/warmpath/warmpath/libs/openai"
)

// words is the vocabulary prompts are drawn from: plain ASCII without
// characters JSON escapes, so a prompt of n bytes is n bytes on the wire.
var words = strings.Fields(`the of and to in is that for it as with was on be by at this
from are or an have not they which one you had were but all their there can more
when will would about if out so what up its into than them only other some time
could these two may then first any new like very our most also after made cache
prefix token worker router request model prompt block hash chunk stream latency`)

// Workload is the fixed set of request bodies a run cycles through: Plain
// for non-streamed and Stream for streamed completions, the same prompts in
// both. Request i sends body i mod len. Bodies are shared read-only by every
// load-generator goroutine.
type Workload struct {
	Plain  [][]byte
	Stream [][]byte
}

// WorkloadSpec describes the prompts of a Workload.
type WorkloadSpec struct {
	// Model is the body's "model".
	Model string
	// PromptBytes is each prompt's exact length in bytes (8192 by default).
	PromptBytes int
	// Prefixes is how many distinct shared prefixes the prompts start with.
	// Each prompt is a prefix of 3/4 of PromptBytes, common to every prompt
	// of its group, then a suffix of its own, so a prefix-aware router finds
	// long matches and keeps hashing and updating its index.
	Prefixes int
	// PerPrefix is how many prompts share each prefix.
	PerPrefix int
	// MaxTokens is the body's "max_tokens"; the fake worker ignores it.
	MaxTokens int
	// Seed makes the text reproducible.
	Seed uint64
}

// NewWorkload builds the bodies for s: Prefixes×PerPrefix prompts, ordered so
// that consecutive requests rotate through the prefixes.
func NewWorkload(s WorkloadSpec) (Workload, error) {
	if s.PromptBytes < 4 || s.Prefixes < 1 || s.PerPrefix < 1 {
		return Workload{}, errors.New("routerbench: workload needs PromptBytes >= 4, Prefixes >= 1 and PerPrefix >= 1")
	}
	prefixLen := s.PromptBytes * 3 / 4
	prefixes := make([]string, s.Prefixes)
	for p := range prefixes {
		prefixes[p] = text(rand.New(rand.NewPCG(s.Seed, uint64(p))), prefixLen)
	}
	var w Workload
	suffixes := rand.New(rand.NewPCG(s.Seed, 1<<32))
	for i := range s.Prefixes * s.PerPrefix {
		prompt := prefixes[i%s.Prefixes] + text(suffixes, s.PromptBytes-prefixLen)
		req := openai.CompletionRequest{Model: s.Model, Prompt: openai.Prompt{Texts: []string{prompt}}}
		req.MaxTokens = &s.MaxTokens
		w.Plain = append(w.Plain, mustJSON(req))
		req.Stream = true
		w.Stream = append(w.Stream, mustJSON(req))
	}
	return w, nil
}

// text returns exactly n bytes of space-separated words drawn from r.
func text(r *rand.Rand, n int) string {
	var b strings.Builder
	b.Grow(n + 16)
	for b.Len() < n {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(words[r.IntN(len(words))])
	}
	return b.String()[:n]
}
