package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/warmpath/warmpath/tests/harness"
)

// model is the model the simulator profile's endpoint serves.
const model = "Llama-3.1-8B-Instruct"

func newClient(baseURL string, opts ...option.RequestOption) openai.Client {
	return openai.NewClient(append([]option.RequestOption{option.WithBaseURL(baseURL + "/v1"), option.WithAPIKey("e2e"),
		option.WithMaxRetries(0), option.WithRequestTimeout(60 * time.Second)}, opts...)...)
}

// answer is what one request returned.
type answer struct {
	text   string
	cached int64
	prompt int64
}

// complete sends one completion, streamed or not.
func complete(ctx context.Context, cl openai.Client, prompt string, stream bool) (answer, error) {
	p := openai.CompletionNewParams{
		Model:     openai.CompletionNewParamsModel(model),
		Prompt:    openai.CompletionNewParamsPromptUnion{OfString: openai.String(prompt)},
		MaxTokens: openai.Int(8),
	}
	if !stream {
		r, err := cl.Completions.New(ctx, p)
		if err != nil {
			return answer{}, err
		}
		if len(r.Choices) == 0 {
			return answer{}, errors.New("completion without choices")
		}
		return answer{r.Choices[0].Text, r.Usage.PromptTokensDetails.CachedTokens, r.Usage.PromptTokens}, nil
	}
	p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	s := cl.Completions.NewStreaming(ctx, p)
	var a answer
	for s.Next() {
		c := s.Current()
		for _, ch := range c.Choices {
			a.text += ch.Text
		}
		if c.Usage.PromptTokens > 0 {
			a.cached, a.prompt = c.Usage.PromptTokensDetails.CachedTokens, c.Usage.PromptTokens
		}
	}
	return a, s.Err()
}

// chat sends one chat completion, streamed or not.
func chat(ctx context.Context, cl openai.Client, system, user string, stream bool) (answer, error) {
	p := openai.ChatCompletionNewParams{
		Model:     openai.ChatModel(model),
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.SystemMessage(system), openai.UserMessage(user)},
		MaxTokens: openai.Int(8),
	}
	if !stream {
		r, err := cl.Chat.Completions.New(ctx, p)
		if err != nil {
			return answer{}, err
		}
		if len(r.Choices) == 0 {
			return answer{}, errors.New("chat completion without choices")
		}
		return answer{r.Choices[0].Message.Content, r.Usage.PromptTokensDetails.CachedTokens, r.Usage.PromptTokens}, nil
	}
	p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	s := cl.Chat.Completions.NewStreaming(ctx, p)
	var a answer
	for s.Next() {
		c := s.Current()
		for _, ch := range c.Choices {
			a.text += ch.Delta.Content
		}
		if c.Usage.PromptTokens > 0 {
			a.cached, a.prompt = c.Usage.PromptTokensDetails.CachedTokens, c.Usage.PromptTokens
		}
	}
	return a, s.Err()
}

// longPrompt is a prompt of well over two LMCache chunks (256 tokens each),
// distinct per seed.
func longPrompt(seed string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Document %s. ", seed)
	for i := range 120 {
		fmt.Fprintf(&b, "Paragraph %d of the shared document says the quick brown fox jumps over the lazy dog. ", i)
	}
	return b.String()
}

// load keeps conns clients sending non-streamed completions through the
// router until stopped, counting what failed. Prompts repeat a few shared
// prefixes, as a chat fleet's do, and each client is a session
// (x-session-id), which the session strategy routes by; the others ignore it.
type load struct {
	ok, failed atomic.Int64
	shed       atomic.Int64 // open loop: arrivals not sent, the in-flight bound reached
	mu         sync.Mutex
	errs       []string
	stop       context.CancelFunc
	done       sync.WaitGroup
}

func startLoad(ctx context.Context, baseURL string, conns int) *load {
	ctx, cancel := context.WithCancel(ctx)
	l := &load{stop: cancel}
	for w := range conns {
		cl := newClient(baseURL, option.WithHeader("x-session-id", fmt.Sprintf("e2e-%d", w)))
		l.done.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				prompt := fmt.Sprintf("%s Question %d from client %d.", longPrompt(fmt.Sprint(i%4)), i, w)
				_, err := complete(ctx, cl, prompt, false)
				l.record(ctx, err)
			}
		})
	}
	return l
}

// record counts one request's outcome; ctx is the load's.
func (l *load) record(ctx context.Context, err error) {
	switch {
	case err == nil:
		l.ok.Add(1)
	case ctx.Err() != nil: // stopped mid-request: not the system's failure
	default:
		l.failed.Add(1)
		l.mu.Lock()
		if len(l.errs) < 10 {
			l.errs = append(l.errs, fmt.Sprintf("%s: %v", time.Now().Format(time.TimeOnly), err))
		}
		l.mu.Unlock()
	}
}

// finish stops the load and fails the test if any request failed or none
// succeeded.
func (l *load) finish(t *testing.T, what string) {
	t.Helper()
	l.stop()
	l.done.Wait()
	t.Logf("%s: %d requests answered, %d failed", what, l.ok.Load(), l.failed.Load())
	if l.failed.Load() > 0 {
		t.Errorf("%s: %d requests failed; first errors:\n%s", what, l.failed.Load(), strings.Join(l.errs, "\n"))
	}
	if l.ok.Load() == 0 {
		t.Errorf("%s: no request was answered", what)
	}
}

// scrape returns the sum of a metric's samples at url (a /metrics page)
// whose labels contain every matcher (name="value" pairs).
func scrape(ctx context.Context, url, name string, matchers ...string) (float64, error) {
	body, err := harness.GetBody(ctx, url)
	if err != nil {
		return 0, err
	}
	if len(matchers) == 0 {
		sum, _, err := harness.SumSamples(body, name)
		return sum, err
	}
	var kept []string
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, name+"{") {
			continue
		}
		all := true
		for _, m := range matchers {
			all = all && strings.Contains(line, m)
		}
		if all {
			kept = append(kept, line)
		}
	}
	sum, _, err := harness.SumSamples([]byte(strings.Join(kept, "\n")+"\n"), name)
	return sum, err
}
