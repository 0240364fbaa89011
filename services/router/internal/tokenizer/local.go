package tokenizer

import (
	"fmt"
	"strings"

	bpe "github.com/tiktoken-go/tokenizer"

	"github.com/warmpath/warmpath/libs/chattemplate"
	"github.com/warmpath/warmpath/services/router/internal/chatjinja"
)

// Local tokenizes in-process, for models configured to use it, saving the
// /tokenize round trip: completion prompts with the model's BPE
// vocabulary, and chats too when the model's chat template is known — a
// built-in one (the simulator's, shared through libs/chattemplate) or the
// model's own Jinja template. The vocabulary and template must be the
// model's own (tests check they give the worker's ids); a wrong one only
// costs cache matches, never correctness.
type Local struct {
	byModel map[string]*localModel
}

type localModel struct {
	codec bpe.Codec
	// chat renders messages; nil leaves chats to the worker.
	chat chatRenderer
}

// chatRenderer renders messages with a generation prompt. cuts, when not
// nil, are chattemplate.Boundaries' offsets where the rendering may be
// tokenized in two parts; a renderer that cannot prove any returns nil.
type chatRenderer interface {
	render(msgs []chattemplate.Message, addGenerationPrompt bool) (text string, cuts []int, err error)
}

// builtinChat is a built-in template, whose cuts are proven for the
// tiktoken encodings (chattemplate.Boundaries).
type builtinChat chattemplate.Name

func (b builtinChat) render(msgs []chattemplate.Message, gen bool) (string, []int, error) {
	text, cuts := chattemplate.Name(b).Boundaries(msgs, gen)
	return text, cuts, nil
}

// jinjaChat is a model's Jinja template. Nothing is known of where its
// text may be cut, so its chats are tokenized whole.
type jinjaChat struct{ t *chatjinja.Template }

func (j jinjaChat) render(msgs []chattemplate.Message, gen bool) (string, []int, error) {
	text, err := j.t.Render(msgs, gen)
	return text, nil, err
}

// ParseLocal reads "model=encoding[:template],..." (encodings as in
// tiktoken: cl100k_base, o200k_base, p50k_base, r50k_base). The optional
// template makes the model's chats tokenized in-process too: "llama3" or
// "chatml" (the built-ins), or "jinja:PATH", a file holding the model's
// tokenizer_config.json or its bare chat_template.
func ParseLocal(spec string) (*Local, error) {
	l := &Local{byModel: map[string]*localModel{}}
	for part := range strings.SplitSeq(spec, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		model, value, ok := strings.Cut(part, "=")
		enc, tmpl, _ := strings.Cut(value, ":")
		if !ok || model == "" || enc == "" {
			return nil, fmt.Errorf("tokenizer: local tokenizer %q: want model=encoding[:template]", part)
		}
		codec, err := bpe.Get(bpe.Encoding(enc))
		if err != nil {
			return nil, fmt.Errorf("tokenizer: local tokenizer for %s: %w", model, err)
		}
		m := &localModel{codec: codec}
		if m.chat, err = parseChat(tmpl); err != nil {
			return nil, fmt.Errorf("tokenizer: local chat template for %s: %w", model, err)
		}
		l.byModel[model] = m
	}
	return l, nil
}

// parseChat reads a template spec; "" is none.
func parseChat(spec string) (chatRenderer, error) {
	switch {
	case spec == "":
		return nil, nil
	case strings.HasPrefix(spec, "jinja:"):
		t, err := chatjinja.Load(strings.TrimPrefix(spec, "jinja:"))
		if err != nil {
			return nil, fmt.Errorf("load: %w", err)
		}
		return jinjaChat{t}, nil
	}
	name, err := chattemplate.Parse(spec)
	if err != nil {
		return nil, fmt.Errorf("%w (or jinja:PATH)", err)
	}
	return builtinChat(name), nil
}

// Encode returns the ids of a completion prompt for model; ok is false when
// no local vocabulary is configured for it.
func (l *Local) Encode(model, prompt string) (ids []uint32, ok bool, err error) {
	m := l.model(model)
	if m == nil {
		return nil, false, nil
	}
	ids, err = m.encode(prompt)
	return ids, true, err
}

// model returns model's configuration, or nil.
func (l *Local) model(model string) *localModel {
	if l == nil {
		return nil
	}
	return l.byModel[model]
}

func (m *localModel) encode(text string) ([]uint32, error) {
	if text == "" {
		return nil, nil
	}
	raw, _, err := m.codec.Encode(text)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: local encode: %w", err)
	}
	ids := make([]uint32, len(raw))
	for i, id := range raw {
		ids[i] = uint32(id)
	}
	return ids, nil
}
