package tokenizer

import (
	"slices"

	"github.com/cespare/xxhash/v2"

	"github.com/warmpath/warmpath/libs/chattemplate"
	"github.com/warmpath/warmpath/services/router/strategy"
)

// tokenizeChat renders and encodes req's messages in-process, with the
// generation prompt (as the worker's /tokenize defaults to). In a chat,
// turn N+1's messages extend turn N's, so the ids of the rendered
// conversation up to its last cut (chattemplate.Boundaries) are cached by
// a hash of (model, those messages), and a later turn finds the longest
// such prefix and encodes only the rest: the ids are the same as encoding
// the whole text, because a cut is where the pre-tokenizer ends a piece.
// reused is the count of ids taken from the cache.
func (c *Client) tokenizeChat(m *localModel, req *strategy.Request) (ids []uint32, reused int, err error) {
	msgs := make([]chattemplate.Message, len(req.Messages))
	for i, msg := range req.Messages {
		msgs[i] = chattemplate.Message{Role: msg.Role, Content: msg.Content}
	}
	text, cuts, err := m.chat.render(msgs, true)
	if err != nil {
		return nil, 0, err
	}
	last := -1 // the longest prefix with a cut: kept for the next turn
	for k := len(cuts) - 1; k >= 1; k-- {
		if cuts[k] >= 0 {
			last = k
			break
		}
	}
	if last < 0 {
		ids, err = m.encode(text)
		return ids, 0, err
	}
	keys := prefixKeys(req, cuts)
	hit, from, base := 0, 0, []uint32(nil)
	for k := last; k >= 1; k-- {
		if cuts[k] < 0 {
			continue
		}
		if p, ok := c.cache.get(keys[k]); ok {
			hit, from, base = k, cuts[k], p
			break
		}
	}
	mid, err := m.encode(text[from:cuts[last]])
	if err != nil {
		return nil, 0, err
	}
	tail, err := m.encode(text[cuts[last]:])
	if err != nil {
		return nil, 0, err
	}
	ids = make([]uint32, 0, len(base)+len(mid)+len(tail))
	ids = append(append(ids, base...), mid...)
	if hit != last {
		// A copy: the cache charges an entry its own capacity, and must
		// not pin the whole answer's array through a shorter slice.
		c.cache.add(keys[last], slices.Clone(ids))
	}
	return append(ids, tail...), len(base), nil
}

// prefixKeys returns, for each k with a cut, the cache key of the rendered
// prefix of req's first k messages: a domain apart from cacheKey's, so a
// prefix is never taken for a whole answer.
func prefixKeys(req *strategy.Request, cuts []int) []uint64 {
	keys := make([]uint64, len(cuts))
	d := xxhash.New()
	_, _ = d.WriteString(req.Model)
	_, _ = d.WriteString("\x00chat-prefix")
	for k, msg := range req.Messages {
		_, _ = d.WriteString("\x00" + msg.Role + "\x00")
		_, _ = d.WriteString(msg.Content)
		if cuts[k+1] >= 0 {
			keys[k+1] = d.Sum64()
		}
	}
	return keys
}
