// Package live is warmpath-bench's live mode: it sends real streaming
// OpenAI requests (the official openai-go client) to a URL, the router or
// one worker, with open-loop arrivals, and measures what a user sees: time
// to first token, inter-token latency, end-to-end latency, tokens, errors.
//
// Arrivals are open-loop: a request is sent at its arrival time whether or
// not earlier ones have finished, except a request with an After
// predecessor (the next round of a conversation), which is sent when that
// predecessor has finished plus its think time, as a user would.
package live

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/warmpath/warmpath/tools/bench/workload"
)

// Message is one chat message.
type Message struct {
	Role, Content string
}

// Request is one request of a workload.
type Request struct {
	// Arrival is when the request is sent, from the start of the run
	// (ignored when After is set).
	Arrival time.Duration
	// After, when ≥ 0, is the index of the request that must finish first;
	// this one is sent Think after it does.
	After int
	Think time.Duration
	// Session goes in the session header (x-user-id by default).
	Session string
	// Prompt is a completion prompt; Messages a chat (one of the two).
	Prompt    string
	Messages  []Message
	MaxTokens int
}

// Result is what one request measured.
type Result struct {
	Index      int
	Start      time.Duration // since the run began
	TTFT       time.Duration
	E2E        time.Duration
	MeanITL    time.Duration // mean gap between content chunks after the first
	PromptTok  int64
	CachedTok  int64 // usage.prompt_tokens_details.cached_tokens
	OutputTok  int64
	Err        string
	Dependents int // requests that waited for this one
}

// Config says where and how to send.
type Config struct {
	// BaseURL is the OpenAI base, e.g. http://127.0.0.1:8100/v1/.
	BaseURL string
	Model   string
	// SessionHeader carries Request.Session (x-user-id when empty).
	SessionHeader string
	// Timeout bounds one request (5 minutes when zero).
	Timeout time.Duration
	// MaxInFlight bounds concurrent requests, so memory stays bounded when
	// the target falls behind (1024 when zero); arrivals beyond it wait.
	MaxInFlight int
	// Progress, when set, is called after each request finishes.
	Progress func(done, total int)
}

// Run sends reqs and returns one Result per request, in reqs' order. It
// returns early with ctx's error if ctx ends.
func Run(ctx context.Context, cfg Config, reqs []Request) ([]Result, error) {
	if cfg.SessionHeader == "" {
		cfg.SessionHeader = "x-user-id"
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Minute
	}
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = 1024
	}
	children := make([][]int, len(reqs))
	var roots []int
	for i, r := range reqs {
		switch {
		case r.After < 0:
			roots = append(roots, i)
		case r.After >= len(reqs) || r.After == i:
			return nil, fmt.Errorf("live: request %d waits for %d, which does not exist", i, r.After)
		default:
			children[r.After] = append(children[r.After], i)
		}
	}
	client := openai.NewClient(option.WithBaseURL(cfg.BaseURL), option.WithAPIKey("warmpath-bench"), option.WithMaxRetries(0))
	results := make([]Result, len(reqs))
	sem := make(chan struct{}, cfg.MaxInFlight)
	begin := time.Now()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		done int
	)
	var send func(i int, at time.Duration)
	send = func(i int, at time.Duration) {
		defer wg.Done()
		if wait := at - time.Since(begin); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				results[i] = Result{Index: i, Err: ctx.Err().Error()}
				return
			case <-t.C:
			}
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			results[i] = Result{Index: i, Err: ctx.Err().Error()}
			return
		}
		res := one(ctx, &client, cfg, reqs[i])
		<-sem
		res.Index = i
		res.Start = time.Since(begin) - res.E2E
		res.Dependents = len(children[i])
		results[i] = res
		mu.Lock()
		done++
		if cfg.Progress != nil {
			cfg.Progress(done, len(reqs))
		}
		mu.Unlock()
		now := time.Since(begin)
		for _, c := range children[i] {
			wg.Add(1)
			go send(c, now+reqs[c].Think)
		}
	}
	for _, i := range roots {
		wg.Add(1)
		go send(i, reqs[i].Arrival)
	}
	wg.Wait()
	return results, ctx.Err()
}

// one sends a request and measures it.
func one(ctx context.Context, client *openai.Client, cfg Config, r Request) Result {
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	var opts []option.RequestOption
	if r.Session != "" {
		opts = append(opts, option.WithHeader(cfg.SessionHeader, r.Session))
	}
	start := time.Now()
	var m meter
	var err error
	if r.Messages != nil {
		err = chat(ctx, client, cfg.Model, r, &m, start, opts)
	} else {
		err = completion(ctx, client, cfg.Model, r, &m, start, opts)
	}
	res := m.result(time.Since(start))
	if err != nil {
		res.Err = err.Error()
	} else if m.first == 0 {
		res.Err = "stream ended without a token"
	}
	return res
}

// meter accumulates one stream's timings.
type meter struct {
	first, last time.Duration
	gaps        time.Duration
	chunks      int
	usage       openai.CompletionUsage
}

func (m *meter) token(at time.Duration) {
	if m.chunks == 0 {
		m.first = at
	} else {
		m.gaps += at - m.last
	}
	m.last = at
	m.chunks++
}

func (m *meter) result(e2e time.Duration) Result {
	r := Result{TTFT: m.first, E2E: e2e, PromptTok: m.usage.PromptTokens,
		CachedTok: m.usage.PromptTokensDetails.CachedTokens, OutputTok: m.usage.CompletionTokens}
	if m.chunks > 1 {
		r.MeanITL = m.gaps / time.Duration(m.chunks-1)
	}
	return r
}

func completion(ctx context.Context, client *openai.Client, model string, r Request, m *meter, start time.Time, opts []option.RequestOption) error {
	stream := client.Completions.NewStreaming(ctx, openai.CompletionNewParams{
		Model:         openai.CompletionNewParamsModel(model),
		Prompt:        openai.CompletionNewParamsPromptUnion{OfString: openai.String(r.Prompt)},
		MaxTokens:     openai.Int(int64(r.MaxTokens)),
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	}, opts...)
	defer stream.Close()
	for stream.Next() {
		c := stream.Current()
		if len(c.Choices) > 0 && c.Choices[0].Text != "" {
			m.token(time.Since(start))
		}
		if c.Usage.TotalTokens > 0 {
			m.usage = c.Usage
		}
	}
	return streamErr(stream.Err())
}

func chat(ctx context.Context, client *openai.Client, model string, r Request, m *meter, start time.Time, opts []option.RequestOption) error {
	msgs := make([]openai.ChatCompletionMessageParamUnion, 0, len(r.Messages))
	for _, msg := range r.Messages {
		switch msg.Role {
		case "system":
			msgs = append(msgs, openai.SystemMessage(msg.Content))
		case "assistant":
			msgs = append(msgs, openai.AssistantMessage(msg.Content))
		default:
			msgs = append(msgs, openai.UserMessage(msg.Content))
		}
	}
	stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
		Model:         model,
		Messages:      msgs,
		MaxTokens:     openai.Int(int64(r.MaxTokens)),
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	}, opts...)
	defer stream.Close()
	for stream.Next() {
		c := stream.Current()
		if len(c.Choices) > 0 && c.Choices[0].Delta.Content != "" {
			m.token(time.Since(start))
		}
		if c.Usage.TotalTokens > 0 {
			m.usage = openai.CompletionUsage{PromptTokens: c.Usage.PromptTokens, CompletionTokens: c.Usage.CompletionTokens,
				TotalTokens: c.Usage.TotalTokens}
			m.usage.PromptTokensDetails.CachedTokens = c.Usage.PromptTokensDetails.CachedTokens
		}
	}
	return streamErr(stream.Err())
}

func streamErr(err error) error {
	if err == nil {
		return nil
	}
	var apiErr *openai.Error
	if errors.As(err, &apiErr) {
		return fmt.Errorf("HTTP %d: %s", apiErr.StatusCode, apiErr.Message)
	}
	return err
}

// Decoder turns token ids into text (the simulator's tokenizer).
type Decoder interface {
	Decode(ids []uint32) (string, error)
}

// FromWorkload renders workload requests as text. Shared parts (a system
// prompt, a document) are decoded once.
func FromWorkload(dec Decoder, reqs []workload.Request) ([]Request, error) {
	// A part is known by where it starts and how long it is: a trace's
	// cut last block shares its start with the whole block.
	type partKey struct {
		start *uint32
		n     int
	}
	cache := map[partKey]string{}
	text := func(p []uint32) (string, error) {
		if len(p) == 0 {
			return "", nil
		}
		key := partKey{&p[0], len(p)}
		if s, ok := cache[key]; ok {
			return s, nil
		}
		s, err := dec.Decode(p)
		if err != nil {
			return "", fmt.Errorf("live: decode: %w", err)
		}
		cache[key] = s
		return s, nil
	}
	out := make([]Request, len(reqs))
	for i, r := range reqs {
		lr := Request{Arrival: r.Arrival, After: r.After, Think: r.Think, Session: r.Session, MaxTokens: r.MaxTokens}
		if r.Chat {
			for j, p := range r.Parts {
				s, err := text(p)
				if err != nil {
					return nil, err
				}
				lr.Messages = append(lr.Messages, Message{Role: r.Roles[j], Content: s})
			}
		} else {
			var b strings.Builder
			for _, p := range r.Parts {
				s, err := text(p)
				if err != nil {
					return nil, err
				}
				b.WriteString(s)
			}
			lr.Prompt = b.String()
		}
		out[i] = lr
	}
	return out, nil
}
