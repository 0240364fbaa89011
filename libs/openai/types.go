package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// StreamOptions is the OpenAI stream_options object.
type StreamOptions struct {
	IncludeUsage         bool `json:"include_usage,omitempty"`
	ContinuousUsageStats bool `json:"continuous_usage_stats,omitempty"`
}

// Prompt is the polymorphic `prompt` field of /v1/completions: a string, a
// list of strings, a list of token ids, or a list of token-id lists. Exactly
// one of Texts and Tokens is non-empty after a successful decode.
type Prompt struct {
	Texts  []string
	Tokens [][]uint32
}

// Len reports how many prompts the field holds.
func (p Prompt) Len() int { return len(p.Texts) + len(p.Tokens) }

// UnmarshalJSON accepts every form the OpenAI API and vLLM accept.
func (p *Prompt) UnmarshalJSON(data []byte) error {
	data = bytes.TrimSpace(data)
	*p = Prompt{}
	if len(data) == 0 || bytes.Equal(data, []byte("null")) {
		return nil
	}
	switch data[0] {
	case '"':
		var s string
		if err := json.Unmarshal(data, &s); err != nil {
			return err
		}
		p.Texts = []string{s}
		return nil
	case '[':
	default:
		return errors.New("prompt must be a string, a list of strings, or a list of token ids")
	}
	var raw []json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	if len(raw) == 0 {
		return errors.New("prompt must not be an empty list")
	}
	switch bytes.TrimSpace(raw[0])[0] {
	case '"':
		return json.Unmarshal(data, &p.Texts)
	case '[':
		return json.Unmarshal(data, &p.Tokens)
	default:
		var ids []uint32
		if err := json.Unmarshal(data, &ids); err != nil {
			return fmt.Errorf("prompt token ids must be non-negative integers: %w", err)
		}
		p.Tokens = [][]uint32{ids}
		return nil
	}
}

// MarshalJSON writes the most compact equivalent form.
func (p Prompt) MarshalJSON() ([]byte, error) {
	switch {
	case len(p.Texts) == 1:
		return json.Marshal(p.Texts[0])
	case len(p.Texts) > 1:
		return json.Marshal(p.Texts)
	case len(p.Tokens) == 1 && len(p.Tokens[0]) > 0:
		return json.Marshal(p.Tokens[0])
	case len(p.Tokens) > 0:
		// Several lists, or one empty list ("[]" would read back as an
		// empty prompt).
		return json.Marshal(p.Tokens)
	default:
		return []byte("null"), nil
	}
}

// Stop is the polymorphic `stop` field: a string or a list of strings.
type Stop []string

// UnmarshalJSON accepts a string or a list of strings.
func (s *Stop) UnmarshalJSON(data []byte) error {
	data = bytes.TrimSpace(data)
	if bytes.Equal(data, []byte("null")) {
		*s = nil
		return nil
	}
	if len(data) > 0 && data[0] == '"' {
		var one string
		if err := json.Unmarshal(data, &one); err != nil {
			return err
		}
		*s = Stop{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(data, &many); err != nil {
		return errors.New("stop must be a string or a list of strings")
	}
	*s = many
	return nil
}

// SamplingParams are the fields shared by completions and chat completions
// that vLLM honours. Pointers distinguish "absent" from zero.
type SamplingParams struct {
	MaxTokens     *int           `json:"max_tokens,omitempty"`
	Temperature   *float64       `json:"temperature,omitempty"`
	TopP          *float64       `json:"top_p,omitempty"`
	N             *int           `json:"n,omitempty"`
	Stop          Stop           `json:"stop,omitempty"`
	Seed          *int64         `json:"seed,omitempty"`
	Stream        bool           `json:"stream,omitempty"`
	StreamOptions *StreamOptions `json:"stream_options,omitempty"`
	User          string         `json:"user,omitempty"`
	IgnoreEOS     bool           `json:"ignore_eos,omitempty"`
	MinTokens     *int           `json:"min_tokens,omitempty"`
	// CacheSalt isolates prefix-cache entries between tenants (vLLM extension).
	CacheSalt string `json:"cache_salt,omitempty"`
}

// CompletionRequest is the body of POST /v1/completions.
type CompletionRequest struct {
	Model  string `json:"model"`
	Prompt Prompt `json:"prompt"`
	Echo   bool   `json:"echo,omitempty"`
	SamplingParams
}

// ChatMessage is one entry of `messages`.
type ChatMessage struct {
	Role    string  `json:"role"`
	Content Content `json:"content"`
	Name    string  `json:"name,omitempty"`
}

// Content is a message's content: a string, or a list of parts of which only
// text parts are understood. It is kept as the concatenated text.
type Content string

// UnmarshalJSON accepts a string, null, or a list of {"type":"text","text":...}.
func (c *Content) UnmarshalJSON(data []byte) error {
	data = bytes.TrimSpace(data)
	switch {
	case bytes.Equal(data, []byte("null")):
		*c = ""
		return nil
	case len(data) > 0 && data[0] == '"':
		var s string
		if err := json.Unmarshal(data, &s); err != nil {
			return err
		}
		*c = Content(s)
		return nil
	}
	var parts []struct {
		Type string  `json:"type"`
		Text *string `json:"text"`
	}
	if err := json.Unmarshal(data, &parts); err != nil {
		return errors.New("content must be a string or a list of content parts")
	}
	var sb strings.Builder
	for i, p := range parts {
		if p.Type != "text" || p.Text == nil {
			return fmt.Errorf("content part %d: only text parts are supported, got type %q", i, p.Type)
		}
		sb.WriteString(*p.Text)
	}
	*c = Content(sb.String())
	return nil
}

// ChatCompletionRequest is the body of POST /v1/chat/completions.
type ChatCompletionRequest struct {
	Model               string        `json:"model"`
	Messages            []ChatMessage `json:"messages"`
	MaxCompletionTokens *int          `json:"max_completion_tokens,omitempty"`
	// AddGenerationPrompt is vLLM's extension; absent means true.
	AddGenerationPrompt *bool `json:"add_generation_prompt,omitempty"`
	SamplingParams
}

// PromptTokensDetails breaks prompt_tokens down; vLLM fills CachedTokens
// with the tokens served from the prefix cache.
type PromptTokensDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

// Usage reports token counts for a request.
type Usage struct {
	PromptTokens        int                  `json:"prompt_tokens"`
	CompletionTokens    int                  `json:"completion_tokens"`
	TotalTokens         int                  `json:"total_tokens"`
	PromptTokensDetails *PromptTokensDetails `json:"prompt_tokens_details,omitempty"`
}

// CompletionChoice is one choice of a completion or completion chunk.
type CompletionChoice struct {
	Index        int     `json:"index"`
	Text         string  `json:"text"`
	Logprobs     any     `json:"logprobs"`
	FinishReason *string `json:"finish_reason"`
	StopReason   any     `json:"stop_reason"`
}

// CompletionResponse is a /v1/completions response or stream chunk
// (object "text_completion" in both cases, as vLLM sends).
type CompletionResponse struct {
	ID      string             `json:"id"`
	Object  string             `json:"object"`
	Created int64              `json:"created"`
	Model   string             `json:"model"`
	Choices []CompletionChoice `json:"choices"`
	Usage   *Usage             `json:"usage,omitempty"`
}

// ChatMessageOut is the assistant message of a non-streamed chat choice.
type ChatMessageOut struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// ChatChoice is one choice of a non-streamed chat completion.
type ChatChoice struct {
	Index        int            `json:"index"`
	Message      ChatMessageOut `json:"message"`
	Logprobs     any            `json:"logprobs"`
	FinishReason *string        `json:"finish_reason"`
	StopReason   any            `json:"stop_reason"`
}

// ChatCompletionResponse is a non-streamed /v1/chat/completions response.
type ChatCompletionResponse struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []ChatChoice `json:"choices"`
	Usage   *Usage       `json:"usage,omitempty"`
}

// ChatDelta is the incremental message of a chat stream chunk.
type ChatDelta struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

// ChatChunkChoice is one choice of a chat stream chunk.
type ChatChunkChoice struct {
	Index        int       `json:"index"`
	Delta        ChatDelta `json:"delta"`
	Logprobs     any       `json:"logprobs"`
	FinishReason *string   `json:"finish_reason"`
	StopReason   any       `json:"stop_reason,omitempty"`
}

// ChatCompletionChunk is one SSE event of a streamed chat completion
// (object "chat.completion.chunk").
type ChatCompletionChunk struct {
	ID      string            `json:"id"`
	Object  string            `json:"object"`
	Created int64             `json:"created"`
	Model   string            `json:"model"`
	Choices []ChatChunkChoice `json:"choices"`
	Usage   *Usage            `json:"usage,omitempty"`
}

// Model is one entry of GET /v1/models.
type Model struct {
	ID          string `json:"id"`
	Object      string `json:"object"`
	Created     int64  `json:"created"`
	OwnedBy     string `json:"owned_by"`
	Root        string `json:"root,omitempty"`
	MaxModelLen int    `json:"max_model_len,omitempty"`
}

// ModelList is the body of GET /v1/models.
type ModelList struct {
	Object string  `json:"object"`
	Data   []Model `json:"data"`
}

// TokenizeRequest is the body of POST /tokenize: either Prompt or Messages.
type TokenizeRequest struct {
	Model               string        `json:"model"`
	Prompt              *string       `json:"prompt,omitempty"`
	Messages            []ChatMessage `json:"messages,omitempty"`
	AddSpecialTokens    *bool         `json:"add_special_tokens,omitempty"`
	AddGenerationPrompt *bool         `json:"add_generation_prompt,omitempty"`
}

// TokenizeResponse is the body returned by POST /tokenize.
type TokenizeResponse struct {
	Count       int      `json:"count"`
	MaxModelLen int      `json:"max_model_len"`
	Tokens      []uint32 `json:"tokens"`
}

// DetokenizeRequest is the body of POST /detokenize.
type DetokenizeRequest struct {
	Model  string   `json:"model"`
	Tokens []uint32 `json:"tokens"`
}

// DetokenizeResponse is the body returned by POST /detokenize.
type DetokenizeResponse struct {
	Prompt string `json:"prompt"`
}

// Finish reasons.
const (
	FinishLength = "length"
	FinishStop   = "stop"
)
