package tokenizer

import (
	"errors"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"unicode"
	"unicode/utf8"

	"github.com/cespare/xxhash/v2"

	"github.com/warmpath/warmpath/services/router/strategy"
)

// defaultCutGrid is how far apart, in bytes of text, the completion
// prefixes kept for reuse are: a long document asked several questions is
// encoded once, each question only from the last kept prefix on.
const defaultCutGrid = 4096

// parallelGrids is how many cut grids long the text still to encode must
// be for it to be encoded on several cores: below, starting goroutines
// costs more than it saves.
const parallelGrids = 4

// tokenizeCompletion encodes a completion prompt in-process, reusing the
// ids of the longest prefix of it that an earlier prompt already had
// encoded. Prefixes end at cuts (pieceCuts), where the pre-tokenizer ends
// a piece whatever follows, so the ids of prefix and rest are those of the
// whole text. Each prompt keeps its last two cuts' prefixes: the last may
// lie in the prompt's own question, the one before in what it shares.
// reused is the count of ids taken from the cache. background: no request
// waits for the ids, so they are encoded on one core (encodePrefixed).
func (c *Client) tokenizeCompletion(m *localModel, req *strategy.Request, background bool) ([]uint32, int, error) {
	text := req.Prompt
	cuts := pieceCuts(text, c.cutGrid)
	return c.encodePrefixed(m, text, cuts, completionKeys(req.Model, text, cuts), 2, background)
}

// encodePrefixed encodes text, reusing the ids of the longest of its
// prefixes that ends at a cut (byte offsets in ascending order, each with
// its cache key) and is cached, and keeps the prefixes up to its last keep
// cuts past that one for later prompts. Text cut at a cut encodes to the
// ids of the whole (the cuts' promise), so prefix and rest are encoded
// apart. reused is the count of ids taken from the cache. A long text is
// encoded on several cores, unless background says no request waits for
// it: then on one, leaving the others to the requests being routed (the
// one it belongs to among them).
func (c *Client) encodePrefixed(m *localModel, text string, cuts []int, keys []uint64, keep int, background bool) (ids []uint32, reused int, err error) {
	hit, base := -1, []uint32(nil)
	for k := len(cuts) - 1; k >= 0; k-- {
		if p, ok := c.cache.get(keys[k]); ok {
			hit, base = k, p
			break
		}
	}
	from := 0
	if hit >= 0 {
		from = cuts[hit]
	}
	// The rest is encoded in spans that end at the cuts whose prefixes are
	// kept and, so a long text is encoded on several cores at once, at
	// every piece cut between them.
	kept := max(hit+1, len(cuts)-keep) // the first cut whose prefix is kept
	var extra []int
	parallel := !background && len(text)-from >= parallelGrids*c.cutGrid
	if parallel {
		extra = pieceCuts(text, c.cutGrid)
	}
	bounds := mergeCuts([]int{from}, cuts[kept:], extra, from)
	if bounds[len(bounds)-1] < len(text) {
		bounds = append(bounds, len(text))
	}
	spans, err := encodeSpans(m, text, bounds, parallel)
	if err != nil {
		return nil, 0, err
	}
	ids = append(make([]uint32, 0, len(base)+len(text)/3), base...)
	k := kept
	for i, span := range spans {
		ids = append(ids, span...)
		for ; k < len(cuts) && cuts[k] <= bounds[i+1]; k++ {
			if cuts[k] == bounds[i+1] {
				// A copy: the cache charges an entry its own capacity,
				// and must not pin the whole answer's array through a
				// shorter slice.
				c.cache.add(keys[k], slices.Clone(ids))
			}
		}
	}
	return ids, len(base), nil
}

// mergeCuts appends to dst, in ascending order and once each, the
// positions of a and b (each ascending) after from.
func mergeCuts(dst, a, b []int, from int) []int {
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		var v int
		switch {
		case j == len(b) || (i < len(a) && a[i] <= b[j]):
			v = a[i]
			i++
		default:
			v = b[j]
			j++
		}
		if v > from && v > dst[len(dst)-1] {
			dst = append(dst, v)
		}
	}
	return dst
}

// encodeSpans encodes text[bounds[i]:bounds[i+1]] for each i, on up to
// GOMAXPROCS goroutines when parallel and there are several: the bounds are piece
// boundaries, so the spans' ids, joined, are the whole text's. Encoding
// is the router's own cost on a long prompt nothing caches (an 8K-token
// document: 3.4 ms on one core), and the request waits for it.
func encodeSpans(m *localModel, text string, bounds []int, parallel bool) ([][]uint32, error) {
	out := make([][]uint32, len(bounds)-1)
	workers := min(runtime.GOMAXPROCS(0), len(out))
	if !parallel || workers <= 1 {
		for i := range out {
			ids, err := m.encode(text[bounds[i]:bounds[i+1]])
			if err != nil {
				return nil, err
			}
			out[i] = ids
		}
		return out, nil
	}
	var (
		next atomic.Int64
		wg   sync.WaitGroup
		errs = make([]error, workers)
	)
	for w := range workers {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < len(out); i = int(next.Add(1) - 1) {
				ids, err := m.encode(text[bounds[i]:bounds[i+1]])
				if err != nil {
					errs[w] = err
					return
				}
				out[i] = ids
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

// completionKeys returns the cache key of each cut's prefix of a
// completion prompt for model: a domain apart from cacheKey's and the
// chats', so a prefix is never taken for a whole answer.
func completionKeys(model, text string, cuts []int) []uint64 {
	keys := make([]uint64, len(cuts))
	d := xxhash.New()
	_, _ = d.WriteString(model)
	_, _ = d.WriteString("\x00completion-prefix\x00")
	from := 0
	for k, cut := range cuts {
		_, _ = d.WriteString(text[from:cut])
		keys[k], from = d.Sum64(), cut
	}
	return keys
}

// pieceCuts returns, for each multiple of grid in (0, len(text)), the first
// position at or after it that is a piece boundary (pieceBoundary) before
// the next multiple; positions depend only on the text before them, so two
// prompts sharing a prefix share its cuts.
func pieceCuts(text string, grid int) []int {
	var cuts []int
	for g := grid; g < len(text); g += grid {
		for i := g; i < min(g+grid, len(text)); i++ {
			if pieceBoundary(text, i) {
				cuts = append(cuts, i)
				break
			}
		}
	}
	return cuts
}

// pieceBoundary says the pre-tokenizers of the tiktoken encodings (cl100k
// and llama3's, o200k, p50k, r50k) end a piece at i whatever the text
// around it, so encoding text[:i] and text[i:] apart gives the ids of the
// whole. Two kinds of places qualify, read off their patterns:
//   - after a lone newline (no whitespace before it) that a letter or
//     digit follows: every pattern ends a piece there, and none lets a
//     piece run on from a newline into what follows (cl100k's
//     "[^\r\n\p{L}\p{N}]?" excludes it; p50k's pieces start with at most
//     one space). A run of whitespace would not do: p50k's "\s+(?!\S)"
//     takes "\n\n" whole at the end of a text, but as "\n", "\n" before
//     a letter;
//   - before a space that a letter precedes and a letter follows: a
//     letter run never takes a trailing space, and " word" is a piece of
//     its own in every pattern.
//
// A cut inside a UTF-8 sequence is never one: both tests read whole runes.
// FuzzPieceBoundary checks the claim against the encoders.
func pieceBoundary(text string, i int) bool {
	if i <= 0 || i >= len(text) {
		return false
	}
	next, _ := utf8.DecodeRuneInString(text[i:])
	if text[i-1] == '\n' {
		before, _ := utf8.DecodeLastRuneInString(text[:i-1])
		return (i == 1 || !unicode.IsSpace(before)) && (unicode.IsLetter(next) || unicode.IsDigit(next))
	}
	if text[i] != ' ' || i+1 >= len(text) {
		return false
	}
	prev, _ := utf8.DecodeLastRuneInString(text[:i])
	after, _ := utf8.DecodeRuneInString(text[i+1:])
	return unicode.IsLetter(prev) && unicode.IsLetter(after)
}
