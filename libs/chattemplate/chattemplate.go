// Package chattemplate renders chat messages into one prompt string with
// the built-in templates (llama3, chatml) that the simulator applies and
// the router reproduces: one implementation, so the two cannot drift.
//
// It also says where a rendering may be cut so that the text before the
// cut can be tokenized once and reused by later turns of the conversation
// (Boundaries): a cut is offered only where the regex pre-tokenizers of the
// tiktoken encodings (cl100k_base, o200k_base, p50k_base, r50k_base)
// provably end a piece, whatever the messages say.
package chattemplate

import (
	"fmt"
	"strings"
)

// Message is one chat message, its content already flattened to text.
type Message struct {
	Role    string
	Content string
}

// Name is a built-in template.
type Name string

// Built-in templates.
const (
	// Llama3 is Meta's Llama 3 instruct format:
	//   <|begin_of_text|><|start_header_id|>{role}<|end_header_id|>\n\n{content}<|eot_id|>...
	// and, with a generation prompt, <|start_header_id|>assistant<|end_header_id|>\n\n
	Llama3 Name = "llama3"
	// ChatML is the <|im_start|>{role}\n{content}<|im_end|>\n format (Qwen,
	// many fine-tunes), with <|im_start|>assistant\n as the generation prompt.
	ChatML Name = "chatml"
)

// Names lists the built-in templates.
var Names = []Name{Llama3, ChatML}

// Parse validates a built-in template name.
func Parse(s string) (Name, error) {
	switch n := Name(s); n {
	case Llama3, ChatML:
		return n, nil
	}
	return "", fmt.Errorf("chattemplate: unknown chat template %q (known: llama3, chatml)", s)
}

// Template pieces.
const (
	llamaBegin     = "<|begin_of_text|>"
	llamaHeadOpen  = "<|start_header_id|>"
	llamaHeadClose = "<|end_header_id|>\n\n"
	llamaEnd       = "<|eot_id|>"
	chatmlOpen     = "<|im_start|>"
	chatmlEnd      = "<|im_end|>\n"
	assistant      = "assistant"
)

// Render applies the template.
func (n Name) Render(msgs []Message, addGenerationPrompt bool) string {
	text, _ := n.Boundaries(msgs, addGenerationPrompt)
	return text
}

// Boundaries renders msgs and returns, for k in 1..len(msgs), cuts[k]: the
// byte offset into text up to which the rendering depends on msgs[:k]
// alone and at which every tiktoken pre-tokenizer ends a piece, so that
//
//	encode(text) == encode(text[:cuts[k]]) ++ encode(text[cuts[k]:])
//
// cuts[k] is -1 where no such offset is proven; cuts[0] is always -1.
//
// Why the cuts are exact: tiktoken splits text into pieces with a regex
// scanned left to right (after splitting out special tokens, none of which
// contains a newline or spans two template markers), and BPE-merges each
// piece alone. So ids concatenate at an offset where a piece ends in both
// the prefix alone and the whole text, and the scan of the rest starts
// fresh there (the regexes have no look-behind).
//
//   - ChatML cuts after a message's "<|im_end|>\n". The piece that holds
//     that "\n" is the punctuation run "|>\n": the punctuation rule
//     (" ?[^\s\p{L}\p{N}]+[\r\n]*", in o200k "[\r\n/]*") takes the newline
//     and stops at the "<" that always follows (the next "<|im_start|>"),
//     or at the end of text; in p50k/r50k the rule takes no newline and
//     "\n" is a piece of its own, ended by that "<". The run cannot start
//     before "|>": "im_end" is letters after the "<|" of "<|im_end",
//     which any content, however it ends, hands over at "i" (a "<" is
//     always taken with the "|" after it).
//   - Llama3 cannot cut after "<|eot_id|>": the next "<|start_header_id|>"
//     continues the same punctuation run "|><|". It cuts one marker later,
//     after "<|eot_id|><|start_header_id|>", where the run "|>" ends at
//     the first letter of the next role; that marker is the same for the
//     next message and the generation prompt, so the text before the cut
//     still depends on msgs[:k] alone. The cut is offered only when a
//     header follows and its role starts with an ASCII letter.
func (n Name) Boundaries(msgs []Message, addGenerationPrompt bool) (text string, cuts []int) {
	var sb strings.Builder
	size := 0
	for _, m := range msgs {
		size += len(m.Role) + len(m.Content) + 48
	}
	sb.Grow(size + 64)
	cuts = make([]int, len(msgs)+1)
	cuts[0] = -1
	switch n {
	case ChatML:
		for i, m := range msgs {
			sb.WriteString(chatmlOpen)
			sb.WriteString(m.Role)
			sb.WriteByte('\n')
			sb.WriteString(m.Content)
			sb.WriteString(chatmlEnd)
			cuts[i+1] = sb.Len()
		}
		if addGenerationPrompt {
			sb.WriteString(chatmlOpen + assistant + "\n")
		}
	default:
		sb.WriteString(llamaBegin)
		for i, m := range msgs {
			if i > 0 {
				cuts[i] = -1
				if startsWithASCIILetter(m.Role) {
					cuts[i] = sb.Len() + len(llamaHeadOpen)
				}
			}
			sb.WriteString(llamaHeadOpen)
			sb.WriteString(m.Role)
			sb.WriteString(llamaHeadClose)
			sb.WriteString(m.Content)
			sb.WriteString(llamaEnd)
		}
		cuts[len(msgs)] = -1
		if addGenerationPrompt {
			if len(msgs) > 0 {
				cuts[len(msgs)] = sb.Len() + len(llamaHeadOpen)
			}
			sb.WriteString(llamaHeadOpen + assistant + llamaHeadClose)
		}
	}
	return sb.String(), cuts
}

func startsWithASCIILetter(s string) bool {
	return s != "" && (s[0] >= 'a' && s[0] <= 'z' || s[0] >= 'A' && s[0] <= 'Z')
}
