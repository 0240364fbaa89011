package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/warmpath/warmpath/libs/openai"
	"github.com/warmpath/warmpath/tools/vllmsim/engine"
	"github.com/warmpath/warmpath/tools/vllmsim/runtime"
)

// job is a validated generation request, common to both endpoints.
type job struct {
	id        string
	model     string
	prompt    []uint32
	maxTokens int
	params    openai.SamplingParams
}

var chatRoles = map[string]bool{"system": true, "user": true, "assistant": true, "tool": true, "developer": true}

func validateMessages(msgs []openai.ChatMessage) error {
	if len(msgs) == 0 {
		return openai.ParamErrorf("messages", "messages must not be empty")
	}
	for i, m := range msgs {
		if !chatRoles[m.Role] {
			return openai.ParamErrorf("messages", "messages[%d].role %q is not one of system, user, assistant, tool, developer", i, m.Role)
		}
	}
	return nil
}

// validateParams checks the sampling fields vLLM rejects.
func validateParams(p *openai.SamplingParams) error {
	switch {
	case p.MaxTokens != nil && *p.MaxTokens < 1:
		return openai.ParamErrorf("max_tokens", "max_tokens must be at least 1, got %d", *p.MaxTokens)
	case p.N != nil && *p.N != 1:
		return openai.ParamErrorf("n", "vllm-sim generates one choice per request; n must be 1, got %d", *p.N)
	case p.Temperature != nil && (*p.Temperature < 0 || *p.Temperature > 2):
		return openai.ParamErrorf("temperature", "temperature must be in [0, 2], got %v", *p.Temperature)
	case p.TopP != nil && (*p.TopP <= 0 || *p.TopP > 1):
		return openai.ParamErrorf("top_p", "top_p must be in (0, 1], got %v", *p.TopP)
	case p.MinTokens != nil && *p.MinTokens < 0:
		return openai.ParamErrorf("min_tokens", "min_tokens must be non-negative, got %d", *p.MinTokens)
	case p.StreamOptions != nil && !p.Stream:
		return openai.ParamErrorf("stream_options", "Stream options can only be defined when `stream=True`.")
	}
	return nil
}

// checkLength applies vLLM's context-length checks and resolves max_tokens.
func (s *Server) checkLength(promptLen int, maxTokens *int, def int) (int, error) {
	if promptLen >= s.cfg.MaxModelLen {
		return 0, openai.ParamErrorf("prompt", "This model's maximum context length is %d tokens. However, your request has %d input tokens. Please reduce the length of the input messages.", s.cfg.MaxModelLen, promptLen)
	}
	if maxTokens == nil {
		return min(def, s.cfg.MaxModelLen-promptLen), nil
	}
	if promptLen+*maxTokens > s.cfg.MaxModelLen {
		return 0, openai.ParamErrorf("max_tokens", "This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the messages, %d in the completion). Please reduce the length of the messages or completion.", s.cfg.MaxModelLen, promptLen+*maxTokens, promptLen, *maxTokens)
	}
	return *maxTokens, nil
}

func (s *Server) completions(w http.ResponseWriter, r *http.Request) {
	var req openai.CompletionRequest
	if !s.decodeOrReply(w, r, &req) {
		return
	}
	j, err := s.completionJob(&req)
	if err != nil {
		openai.WriteError(w, err)
		return
	}
	var echo string
	if req.Echo {
		echo, _ = s.cfg.Tokenizer.Decode(j.prompt)
	}
	s.run(w, r, j, &completionFormat{echo: echo})
}

func (s *Server) completionJob(req *openai.CompletionRequest) (*job, error) {
	model, err := s.resolveModel(req.Model)
	if err != nil {
		return nil, err
	}
	if err := validateParams(&req.SamplingParams); err != nil {
		return nil, err
	}
	var prompt []uint32
	switch {
	case req.Prompt.Len() == 0:
		return nil, openai.ParamErrorf("prompt", "prompt is required")
	case req.Prompt.Len() > 1:
		return nil, openai.ParamErrorf("prompt", "vllm-sim takes one prompt per request; got a batch of %d", req.Prompt.Len())
	case len(req.Prompt.Texts) == 1:
		if prompt, err = s.cfg.Tokenizer.Encode(req.Prompt.Texts[0]); err != nil {
			return nil, openai.ParamErrorf("prompt", "%v", err)
		}
	default:
		prompt = req.Prompt.Tokens[0]
		if err := s.cfg.Tokenizer.Validate(prompt); err != nil {
			return nil, openai.ParamErrorf("prompt", "%v", err)
		}
	}
	if len(prompt) == 0 {
		return nil, openai.ParamErrorf("prompt", "prompt must not be empty")
	}
	maxTokens, err := s.checkLength(len(prompt), req.MaxTokens, s.cfg.DefaultCompletionMaxTokens)
	if err != nil {
		return nil, err
	}
	return &job{id: newID("cmpl-"), model: model, prompt: prompt, maxTokens: maxTokens, params: req.SamplingParams}, nil
}

func (s *Server) chatCompletions(w http.ResponseWriter, r *http.Request) {
	var req openai.ChatCompletionRequest
	if !s.decodeOrReply(w, r, &req) {
		return
	}
	j, err := s.chatJob(&req)
	if err != nil {
		openai.WriteError(w, err)
		return
	}
	s.run(w, r, j, &chatFormat{})
}

func (s *Server) chatJob(req *openai.ChatCompletionRequest) (*job, error) {
	model, err := s.resolveModel(req.Model)
	if err != nil {
		return nil, err
	}
	if req.MaxCompletionTokens != nil {
		if req.MaxTokens != nil && *req.MaxTokens != *req.MaxCompletionTokens {
			return nil, openai.ParamErrorf("max_completion_tokens", "max_tokens and max_completion_tokens disagree")
		}
		req.MaxTokens = req.MaxCompletionTokens
	}
	if err := validateParams(&req.SamplingParams); err != nil {
		return nil, err
	}
	if err := validateMessages(req.Messages); err != nil {
		return nil, err
	}
	prompt, err := s.cfg.Tokenizer.EncodeChat(req.Messages, req.AddGenerationPrompt == nil || *req.AddGenerationPrompt)
	if err != nil {
		return nil, openai.ParamErrorf("messages", "%v", err)
	}
	maxTokens, err := s.checkLength(len(prompt), req.MaxTokens, s.cfg.DefaultChatMaxTokens)
	if err != nil {
		return nil, err
	}
	return &job{id: newID("chatcmpl-"), model: model, prompt: prompt, maxTokens: maxTokens, params: req.SamplingParams}, nil
}

// format renders one endpoint's response shapes.
type format interface {
	// full renders the non-streamed response.
	full(j *job, created int64, text string, usage *openai.Usage) any
	// chunks renders the stream events for one piece of text; first and
	// finish mark the first and last token.
	chunks(j *job, created int64, text string, first, finish bool, usage *openai.Usage) []any
	// usageChunk renders the final usage-only event.
	usageChunk(j *job, created int64, usage *openai.Usage) any
}

// run submits the job and writes the response, streamed or not. A client
// that goes away aborts the request so its KV blocks are freed.
func (s *Server) run(w http.ResponseWriter, r *http.Request, j *job, f format) {
	gen := s.cfg.Tokenizer.Generator(j.prompt, seedOf(j.params.Seed))
	req := &engine.Request{
		ID: j.id, Prompt: j.prompt, MaxTokens: j.maxTokens,
	}
	if j.params.CacheSalt != "" {
		req.Extra = []string{j.params.CacheSalt}
	}
	wall := time.Now()
	tokens, err := s.cfg.Generator.Submit(withTokens(req, gen))
	if err != nil {
		openai.WriteError(w, submitError(err))
		return
	}
	// Submit set Arrival; the engine never changes it after.
	at := arrival{wall: wall, sim: req.Arrival}
	created := time.Now().Unix()
	if j.params.Stream {
		s.stream(r, w, j, f, created, tokens, at)
		return
	}
	var sb strings.Builder
	var last runtime.Token
	for {
		select {
		case <-r.Context().Done():
			s.cfg.Generator.Abort(j.id)
			return
		case tok, ok := <-tokens:
			if !ok {
				if !last.Final {
					openai.WriteError(w, openai.Errorf(http.StatusServiceUnavailable, "request %s was aborted", j.id))
					return
				}
				s.traceFinished(r.Context(), r.Header, j, at, last.Stats)
				writeJSON(w, http.StatusOK, f.full(j, created, sb.String(), s.usage(last.Stats)))
				return
			}
			piece, _ := s.cfg.Tokenizer.Decode([]uint32{tok.ID})
			sb.WriteString(piece)
			last = tok
		}
	}
}

func (s *Server) stream(r *http.Request, w http.ResponseWriter, j *job, f format, created int64, tokens <-chan runtime.Token, at arrival) {
	ctx := r.Context()
	sse := openai.NewSSEWriter(w)
	includeUsage := j.params.StreamOptions != nil && j.params.StreamOptions.IncludeUsage
	continuous := includeUsage && j.params.StreamOptions.ContinuousUsageStats
	for {
		select {
		case <-ctx.Done():
			s.cfg.Generator.Abort(j.id)
			return
		case tok, ok := <-tokens:
			if !ok {
				// Aborted (shutdown): end the stream without [DONE] so
				// the client sees it was cut short.
				return
			}
			piece, _ := s.cfg.Tokenizer.Decode([]uint32{tok.ID})
			var usage *openai.Usage
			if continuous {
				usage = s.usage(tok.Stats)
			}
			for _, ev := range f.chunks(j, created, piece, tok.First, tok.Final, usage) {
				if err := writeEvent(sse, ev); err != nil {
					s.cfg.Generator.Abort(j.id)
					return
				}
			}
			if !tok.Final {
				continue
			}
			// The engine finished the request whether or not the client
			// reads the rest of the stream.
			s.traceFinished(ctx, r.Header, j, at, tok.Stats)
			if includeUsage {
				if err := writeEvent(sse, f.usageChunk(j, created, s.usage(tok.Stats))); err != nil {
					return
				}
			}
			_ = sse.WriteDone()
			return
		}
	}
}

func writeEvent(sse *openai.SSEWriter, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("marshal stream chunk: %w", err)
	}
	return sse.WriteData(b)
}

func (s *Server) usage(st engine.Stats) *openai.Usage {
	u := &openai.Usage{
		PromptTokens: st.PromptTokens, CompletionTokens: st.OutputTokens,
		TotalTokens: st.PromptTokens + st.OutputTokens,
	}
	if s.cfg.EnablePromptTokensDetails {
		// vLLM counts connector (LMCache) hits as cached too.
		u.PromptTokensDetails = &openai.PromptTokensDetails{CachedTokens: st.CachedTokens + st.ExternalTokens}
	}
	return u
}

func submitError(err error) error {
	switch {
	case errors.Is(err, engine.ErrTooLong), errors.Is(err, engine.ErrEmptyPrompt):
		return openai.Errorf(http.StatusBadRequest, "%v", err)
	case errors.Is(err, runtime.ErrOverloaded):
		return openai.Errorf(http.StatusServiceUnavailable, "%v; retry later", err)
	default:
		return openai.Errorf(http.StatusInternalServerError, "%v", err)
	}
}

func seedOf(seed *int64) int64 {
	if seed == nil {
		return 0
	}
	return *seed
}

// withTokens makes the engine draw r's output from gen.
func withTokens(r *engine.Request, gen func(int) uint32) *engine.Request {
	r.Generate = gen
	return r
}

func finishPtr(finish bool) *string {
	if !finish {
		return nil
	}
	s := openai.FinishLength
	return &s
}

type completionFormat struct{ echo string }

func (c *completionFormat) full(j *job, created int64, text string, usage *openai.Usage) any {
	return openai.CompletionResponse{
		ID: j.id, Object: "text_completion", Created: created, Model: j.model,
		Choices: []openai.CompletionChoice{{Index: 0, Text: c.echo + text, FinishReason: finishPtr(true)}},
		Usage:   usage,
	}
}

func (c *completionFormat) chunks(j *job, created int64, text string, first, finish bool, usage *openai.Usage) []any {
	if first {
		text = c.echo + text
	}
	return []any{openai.CompletionResponse{
		ID: j.id, Object: "text_completion", Created: created, Model: j.model,
		Choices: []openai.CompletionChoice{{Index: 0, Text: text, FinishReason: finishPtr(finish)}},
		Usage:   usage,
	}}
}

func (c *completionFormat) usageChunk(j *job, created int64, usage *openai.Usage) any {
	return openai.CompletionResponse{
		ID: j.id, Object: "text_completion", Created: created, Model: j.model,
		Choices: []openai.CompletionChoice{}, Usage: usage,
	}
}

type chatFormat struct{}

func (chatFormat) full(j *job, created int64, text string, usage *openai.Usage) any {
	return openai.ChatCompletionResponse{
		ID: j.id, Object: "chat.completion", Created: created, Model: j.model,
		Choices: []openai.ChatChoice{{Index: 0, Message: openai.ChatMessageOut{Role: "assistant", Content: text}, FinishReason: finishPtr(true)}},
		Usage:   usage,
	}
}

func (chatFormat) chunks(j *job, created int64, text string, first, finish bool, usage *openai.Usage) []any {
	chunk := func(d openai.ChatDelta, fin bool, u *openai.Usage) openai.ChatCompletionChunk {
		return openai.ChatCompletionChunk{
			ID: j.id, Object: "chat.completion.chunk", Created: created, Model: j.model,
			Choices: []openai.ChatChunkChoice{{Index: 0, Delta: d, FinishReason: finishPtr(fin)}},
			Usage:   u,
		}
	}
	var out []any
	if first {
		// vLLM opens a chat stream with the role and empty content.
		empty := ""
		out = append(out, chunk(openai.ChatDelta{Role: "assistant", Content: &empty}, false, nil))
	}
	return append(out, chunk(openai.ChatDelta{Content: &text}, finish, usage))
}

func (chatFormat) usageChunk(j *job, created int64, usage *openai.Usage) any {
	return openai.ChatCompletionChunk{
		ID: j.id, Object: "chat.completion.chunk", Created: created, Model: j.model,
		Choices: []openai.ChatChunkChoice{}, Usage: usage,
	}
}
