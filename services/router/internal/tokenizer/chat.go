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
	// The rendered conversation's cuts and their keys, in order; the
	// longest is kept for the next turn. A template that cannot be cut
	// (Jinja) gives no cuts, and a conversation may have none usable: the
	// text is then encoded whole.
	var at []int
	var atKeys []uint64
	if len(cuts) > 0 && slices.ContainsFunc(cuts[1:], func(c int) bool { return c >= 0 }) {
		keys := prefixKeys(req, cuts)
		for k := 1; k < len(cuts); k++ {
			if cuts[k] >= 0 {
				at, atKeys = append(at, cuts[k]), append(atKeys, keys[k])
			}
		}
	}
	return c.encodePrefixed(m, text, at, atKeys, 1, false)
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
