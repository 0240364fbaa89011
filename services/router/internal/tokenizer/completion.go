package tokenizer

import (
	"slices"
	"unicode"
	"unicode/utf8"

	"github.com/cespare/xxhash/v2"

	"github.com/warmpath/warmpath/services/router/strategy"
)

// defaultCutGrid is how far apart, in bytes of text, the completion
// prefixes kept for reuse are: a long document asked several questions is
// encoded once, each question only from the last kept prefix on.
const defaultCutGrid = 4096

// tokenizeCompletion encodes a completion prompt in-process, reusing the
// ids of the longest prefix of it that an earlier prompt already had
// encoded. Prefixes end at cuts (pieceCuts), where the pre-tokenizer ends
// a piece whatever follows, so the ids of prefix and rest are those of the
// whole text. Each prompt keeps its last two cuts' prefixes: the last may
// lie in the prompt's own question, the one before in what it shares.
// reused is the count of ids taken from the cache.
func (c *Client) tokenizeCompletion(m *localModel, req *strategy.Request) ([]uint32, int, error) {
	text := req.Prompt
	cuts := pieceCuts(text, c.cutGrid)
	return c.encodePrefixed(m, text, cuts, completionKeys(req.Model, text, cuts), 2)
}

// encodePrefixed encodes text, reusing the ids of the longest of its
// prefixes that ends at a cut (byte offsets in ascending order, each with
// its cache key) and is cached, and keeps the prefixes up to its last keep
// cuts past that one for later prompts. Text cut at a cut encodes to the
// ids of the whole (the cuts' promise), so prefix and rest are encoded
// apart. reused is the count of ids taken from the cache.
func (c *Client) encodePrefixed(m *localModel, text string, cuts []int, keys []uint64, keep int) (ids []uint32, reused int, err error) {
	if len(cuts) == 0 {
		ids, err = m.encode(text)
		return ids, 0, err
	}
	hit, base := -1, []uint32(nil)
	for k := len(cuts) - 1; k >= 0; k-- {
		if p, ok := c.cache.get(keys[k]); ok {
			hit, base = k, p
			break
		}
	}
	ids = append(make([]uint32, 0, len(base)+len(text)/3), base...)
	from := 0
	if hit >= 0 {
		from = cuts[hit]
	}
	// Up to each of the last keep cuts past the hit, one encode each, and
	// their prefixes kept.
	for k := max(hit+1, len(cuts)-keep); k < len(cuts); k++ {
		seg, err := m.encode(text[from:cuts[k]])
		if err != nil {
			return nil, 0, err
		}
		ids, from = append(ids, seg...), cuts[k]
		// A copy: the cache charges an entry its own capacity, and must
		// not pin the whole answer's array through a shorter slice.
		c.cache.add(keys[k], slices.Clone(ids))
	}
	tail, err := m.encode(text[from:])
	if err != nil {
		return nil, 0, err
	}
	return append(ids, tail...), len(base), nil
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
