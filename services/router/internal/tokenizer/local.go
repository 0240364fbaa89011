package tokenizer

import (
	"fmt"
	"strings"

	bpe "github.com/tiktoken-go/tokenizer"
)

// Local tokenizes completion prompts in-process with a BPE vocabulary, for
// models configured to use one, saving the /tokenize round trip. Chat
// messages still go to the worker: only it knows the exact chat template.
// The vocabulary must be the model's own (a test checks it gives the
// worker's ids); a wrong one only costs cache matches, never correctness.
type Local struct {
	byModel map[string]bpe.Codec
}

// ParseLocal reads "model=encoding,model=encoding" (encodings as in
// tiktoken: cl100k_base, o200k_base, p50k_base, r50k_base).
func ParseLocal(spec string) (*Local, error) {
	l := &Local{byModel: map[string]bpe.Codec{}}
	for part := range strings.SplitSeq(spec, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		model, enc, ok := strings.Cut(part, "=")
		if !ok || model == "" || enc == "" {
			return nil, fmt.Errorf("tokenizer: local tokenizer %q: want model=encoding", part)
		}
		codec, err := bpe.Get(bpe.Encoding(enc))
		if err != nil {
			return nil, fmt.Errorf("tokenizer: local tokenizer for %s: %w", model, err)
		}
		l.byModel[model] = codec
	}
	return l, nil
}

// Encode returns the ids of a completion prompt for model; ok is false when
// no local vocabulary is configured for it.
func (l *Local) Encode(model, prompt string) (ids []uint32, ok bool, err error) {
	if l == nil {
		return nil, false, nil
	}
	codec, found := l.byModel[model]
	if !found {
		return nil, false, nil
	}
	raw, _, err := codec.Encode(prompt)
	if err != nil {
		return nil, true, fmt.Errorf("tokenizer: local encode: %w", err)
	}
	ids = make([]uint32, len(raw))
	for i, id := range raw {
		ids[i] = uint32(id)
	}
	return ids, true, nil
}
