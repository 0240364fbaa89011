package tokenize

import (
	"fmt"

	"github.com/warmpath/warmpath/libs/chattemplate"
	"github.com/warmpath/warmpath/libs/openai"
)

// Template renders chat messages into one prompt string. The special
// markers are encoded as ordinary text by the tiktoken vocabularies, which
// do not define them; what matters for caching and routing is that the
// rendering is deterministic and that /tokenize applies the same one. The
// rendering lives in libs/chattemplate, which the router shares, so the
// router's in-process chat tokenization cannot drift from the simulator's.
type Template = chattemplate.Name

// Supported templates.
const (
	Llama3 = chattemplate.Llama3
	ChatML = chattemplate.ChatML
)

// ParseTemplate validates a --chat-template value.
func ParseTemplate(s string) (Template, error) {
	t, err := chattemplate.Parse(s)
	if err != nil {
		return "", fmt.Errorf("tokenize: %w", err)
	}
	return t, nil
}

// Messages converts request messages to the template's.
func Messages(msgs []openai.ChatMessage) []chattemplate.Message {
	out := make([]chattemplate.Message, len(msgs))
	for i, m := range msgs {
		out[i] = chattemplate.Message{Role: m.Role, Content: string(m.Content)}
	}
	return out
}
