package tokenize

import (
	"fmt"
	"strings"

	"github.com/warmpath/warmpath/libs/openai"
)

// Template renders chat messages into one prompt string. The special
// markers are encoded as ordinary text by the tiktoken vocabularies, which
// do not define them; what matters for caching and routing is that the
// rendering is deterministic and that /tokenize applies the same one.
type Template string

// Supported templates.
const (
	// Llama3 is Meta's Llama 3 instruct format:
	//   <|begin_of_text|><|start_header_id|>{role}<|end_header_id|>\n\n{content}<|eot_id|>...
	// and, with a generation prompt, <|start_header_id|>assistant<|end_header_id|>\n\n
	Llama3 Template = "llama3"
	// ChatML is the <|im_start|>{role}\n{content}<|im_end|>\n format (Qwen,
	// many fine-tunes), with <|im_start|>assistant\n as the generation prompt.
	ChatML Template = "chatml"
)

// ParseTemplate validates a --chat-template value.
func ParseTemplate(s string) (Template, error) {
	switch t := Template(s); t {
	case Llama3, ChatML:
		return t, nil
	}
	return "", fmt.Errorf("tokenize: unknown chat template %q (known: llama3, chatml)", s)
}

// Render applies the template.
func (t Template) Render(msgs []openai.ChatMessage, addGenerationPrompt bool) string {
	var sb strings.Builder
	switch t {
	case ChatML:
		for _, m := range msgs {
			fmt.Fprintf(&sb, "<|im_start|>%s\n%s<|im_end|>\n", m.Role, m.Content)
		}
		if addGenerationPrompt {
			sb.WriteString("<|im_start|>assistant\n")
		}
	default:
		sb.WriteString("<|begin_of_text|>")
		for _, m := range msgs {
			fmt.Fprintf(&sb, "<|start_header_id|>%s<|end_header_id|>\n\n%s<|eot_id|>", m.Role, m.Content)
		}
		if addGenerationPrompt {
			sb.WriteString("<|start_header_id|>assistant<|end_header_id|>\n\n")
		}
	}
	return sb.String()
}
