// Package tokenize gives the simulator a real BPE tokenizer (the
// vocabularies embedded in tiktoken-go) and the chat templates that turn
// `messages` into a prompt, so /tokenize, the engine and the router all see
// the same token ids for the same text.
package tokenize

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/tiktoken-go/tokenizer"

	"github.com/warmpath/warmpath/libs/openai"
)

// Encodings lists the supported --tokenizer values.
var Encodings = []string{string(tokenizer.Cl100kBase), string(tokenizer.O200kBase), string(tokenizer.P50kBase), string(tokenizer.R50kBase)}

// Tokenizer encodes and decodes text. It is safe for concurrent use.
type Tokenizer struct {
	codec    tokenizer.Codec
	template Template
	// words are token ids of common English words with a leading space,
	// used to generate readable output text.
	words []uint32
	// vocab is the exclusive upper bound of valid ids.
	vocab uint32
}

// New returns a tokenizer for a tiktoken encoding name and a chat template.
func New(encoding string, tmpl Template) (*Tokenizer, error) {
	if !slices.Contains(Encodings, encoding) {
		return nil, fmt.Errorf("tokenize: unknown encoding %q (known: %s)", encoding, strings.Join(Encodings, ", "))
	}
	codec, err := tokenizer.Get(tokenizer.Encoding(encoding))
	if err != nil {
		return nil, fmt.Errorf("tokenize: load %s: %w", encoding, err)
	}
	// Decoding a slice can split a multi-byte character; replace as
	// tiktoken does rather than emit invalid UTF-8 in JSON.
	codec.SetErrorMode(tokenizer.ErrorModeReplace)
	t := &Tokenizer{codec: codec, template: tmpl}
	seen := map[uint32]bool{}
	for _, w := range strings.Fields(wordList) {
		ids, _, err := codec.Encode(" " + w)
		if err != nil {
			return nil, fmt.Errorf("tokenize: encode word list: %w", err)
		}
		if len(ids) == 1 && !seen[uint32(ids[0])] {
			seen[uint32(ids[0])] = true
			t.words = append(t.words, uint32(ids[0]))
		}
	}
	if len(t.words) == 0 {
		return nil, errors.New("tokenize: no single-token words in this encoding")
	}
	t.vocab = vocabSize(encoding)
	return t, nil
}

func vocabSize(encoding string) uint32 {
	switch encoding {
	case string(tokenizer.O200kBase):
		return 200019
	case string(tokenizer.Cl100kBase):
		return 100277
	default:
		return 50281
	}
}

// Name returns the encoding name.
func (t *Tokenizer) Name() string { return t.codec.GetName() }

// Encode returns the token ids of text.
func (t *Tokenizer) Encode(text string) ([]uint32, error) {
	ids, _, err := t.codec.Encode(text)
	if err != nil {
		return nil, fmt.Errorf("tokenize: encode: %w", err)
	}
	out := make([]uint32, len(ids))
	for i, id := range ids {
		out[i] = uint32(id)
	}
	return out, nil
}

// ErrInvalidToken is returned when decoding or accepting an id outside the
// vocabulary.
var ErrInvalidToken = errors.New("tokenize: token id out of vocabulary")

// Validate reports the first id that is not in the vocabulary.
func (t *Tokenizer) Validate(ids []uint32) error {
	for _, id := range ids {
		if id >= t.vocab {
			return fmt.Errorf("%w: %d (vocabulary size %d)", ErrInvalidToken, id, t.vocab)
		}
	}
	return nil
}

// Decode returns the text of ids.
func (t *Tokenizer) Decode(ids []uint32) (string, error) {
	u := make([]uint, len(ids))
	for i, id := range ids {
		u[i] = uint(id)
	}
	s, err := t.codec.Decode(u)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrInvalidToken, err)
	}
	return s, nil
}

// ApplyChatTemplate renders messages into a prompt string.
func (t *Tokenizer) ApplyChatTemplate(msgs []openai.ChatMessage, addGenerationPrompt bool) string {
	return t.template.Render(Messages(msgs), addGenerationPrompt)
}

// EncodeChat renders and encodes messages.
func (t *Tokenizer) EncodeChat(msgs []openai.ChatMessage, addGenerationPrompt bool) ([]uint32, error) {
	return t.Encode(t.ApplyChatTemplate(msgs, addGenerationPrompt))
}

// Words returns the token ids of the common English words (each one token,
// with its leading space) that generated text is drawn from: a sequence of
// them decodes to text that encodes back to the same ids.
func (t *Tokenizer) Words() []uint32 { return slices.Clone(t.words) }

// Generator returns a deterministic source of output tokens: the same
// prompt and seed give the same words, as greedy decoding would.
func (t *Tokenizer) Generator(prompt []uint32, seed int64) func(i int) uint32 {
	h := fnv.New64a()
	var buf [4]byte
	for _, id := range prompt {
		buf[0], buf[1], buf[2], buf[3] = byte(id), byte(id>>8), byte(id>>16), byte(id>>24)
		_, _ = h.Write(buf[:])
	}
	rng := rand.New(rand.NewPCG(h.Sum64(), uint64(seed)))
	var drawn []uint32
	return func(i int) uint32 {
		for len(drawn) <= i {
			drawn = append(drawn, t.words[rng.IntN(len(t.words))])
		}
		return drawn[i]
	}
}

// wordList seeds generated text with common English words.
const wordList = `the of and to in is that it was for on are as with his they at be this from have or by
one had not but what all were when we there can an your which their said if do will each about how up out
them then she many some so these would other into has more her two like him see time could no make than first
been its who now people my made over did down only way find use may water long little very after words called
just where most know get through back much before go good new write our used me man too any day same right look
think also around another came come work three word must because does part even place well such here take why
things help put years different away again off went old number great tell men say small every found still between
name should home big give air line set own under read last never us left end along while might next sound below
saw something thought both few those always looked show large often together asked house world going want school
important until form food keep children feet land side without boy once animals life enough took sometimes four head
above kind began almost live page got earth need far hand high year mother light parts country father let night
following picture being study second eyes soon times story boys since white days ever paper hard near sentence better
best across during today others however sure means knew its try told young miles sun ways thing whole hear example
heard several change answer room sea against top turned learn point city play toward five using himself usually`
