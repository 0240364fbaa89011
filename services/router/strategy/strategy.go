// Package strategy decides which worker serves a request. Strategies are
// plain Go: they see a parsed view of the request and a snapshot of the
// candidate workers, never HTTP, so the router and the benchmark's
// discrete-event mode run the very same code.
package strategy

import "errors"

// Message is one chat message as the router sees it.
type Message struct {
	Role    string
	Content string
}

// Request is the routing-relevant view of one request.
//
// Its strings point into the request's buffers, which the server reuses
// once the request is answered: a strategy that keeps one past Pick (a
// cache key, a session table entry) must copy it (strings.Clone).
type Request struct {
	// Model is the served model name the request asks for.
	Model string
	// Prompt is the completion prompt text; empty for chat requests.
	Prompt string
	// Messages are the chat messages; nil for completion requests.
	Messages []Message
	// SessionKey identifies a conversation or user (from configured
	// headers, then the body's `user`); empty when absent.
	SessionKey string
	// TokenIDs are the prompt's token ids when known (kvaware); may be nil.
	// When PromptTokens is set they are only its head (HeadRouter).
	TokenIDs []uint32
	// PromptTokens is the whole prompt's length in tokens, estimated, when
	// TokenIDs hold only its head; 0 when TokenIDs are the whole prompt.
	PromptTokens int
	// CacheSalt and LoRA distinguish cache entries beyond the text.
	CacheSalt string
	LoRA      string
}

// Endpoint is a strategy's view of one worker at decision time. Callers
// pass only workers that are healthy, serve the model and have capacity.
type Endpoint struct {
	// ID is the worker's stable key (its base URL).
	ID string
	// InFlight is the router's own count of requests at this worker.
	InFlight int
	// Running and Waiting are the worker's scraped vllm:num_requests_running
	// and vllm:num_requests_waiting (informational; they include this
	// router's own requests).
	Running, Waiting int
	// External is the load at the worker that this router did not send, as
	// of the last scrape: running + waiting minus the router's in-flight
	// count at that moment (other routers' traffic), never negative.
	External int
	// KVCacheUsage is the scraped vllm:kv_cache_usage_perc (0..1).
	KVCacheUsage float64
	// BlockSize and NumGPUBlocks come from vllm:cache_config_info; 0 when
	// not scraped yet.
	BlockSize, NumGPUBlocks int
	// PendingPrefill is the prompt tokens this router sent the worker
	// that it has not begun answering: the Decision.PrefillTokens of its
	// requests still before their first token. A new request's prefill
	// queues behind them (vLLM schedules running prefills first), so they
	// are most of its wait.
	PendingPrefill int
}

// Load is the endpoint's load in requests: the router's own in-flight
// count (always fresh) plus the external load last scraped (stale, but the
// only view of other routers' traffic). Taking the scraped total instead
// would let a scrape that is a few milliseconds old mislead every decision
// when requests are short.
func (e Endpoint) Load() float64 {
	return float64(e.InFlight + e.External)
}

// Decision is a strategy's choice and why.
type Decision struct {
	// Endpoint is the chosen Endpoint.ID.
	Endpoint string
	// Strategy names the strategy that decided (after any fallback, e.g.
	// "prefixaware" for a session request without a key).
	Strategy string
	// MatchedChunks of TotalChunks of the prompt were believed cached on
	// the chosen worker (cache-aware strategies); MatchRatio is their ratio.
	MatchedChunks, TotalChunks int
	MatchRatio                 float64
	// PrefillTokens is the work the strategy expects the worker to do
	// before the first token, in prompt tokens to compute: those found in
	// none of its caches and, for kvaware, the loads from its L1 and the
	// L2 at what they cost of a prefill (the timing model's shares); 0
	// when it does not know. The router counts them in the worker's
	// PendingPrefill until the first token arrives.
	PrefillTokens int
	// TierBlocks splits kvaware's MatchedChunks by the tier credited:
	// GPU, CPU (LMCache L1) and the shared L2, in that order. Where each
	// tier's knowledge comes from is the worker's /debug/endpoints "tiers".
	TierBlocks [3]int
	// Fallback says why a cache-aware strategy had nothing to route on
	// (FallbackNoPrefixCached, FallbackNoTokens); "" when it had, and for
	// strategies that do not look at caches. The router logs and counts it.
	Fallback string
	// Keys are the prompt's block keys at the chosen worker's block size,
	// when the strategy wants to hear when their prefill ends
	// (PrefillObserver); nil otherwise.
	Keys []uint64
	// BlockSize is the block size in tokens the prompt's keys were
	// computed at for the chosen worker (kvaware); 0 otherwise.
	BlockSize int
}

// Fallback reasons (Decision.Fallback).
const (
	// FallbackNoPrefixCached: no candidate worker was believed to hold any
	// of the prompt's leading chunks, so the choice fell to load and the
	// tie-break. A prompt shorter than one chunk is not counted: it has
	// nothing a cache could hold.
	FallbackNoPrefixCached = "no_prefix_cached"
	// FallbackNoTokens: kvaware had no token ids (tokenization failed, or
	// no tokenizer) and routed by prefixaware instead.
	FallbackNoTokens = "no_tokens"
)

// PrefillObserver is implemented by strategies that want to know when a
// worker finished the prefill of a prompt they routed (its Decision.Keys):
// kvaware keeps its views of LMCache's CPU tier in LMCache's own order.
type PrefillObserver interface {
	Prefilled(worker string, keys []uint64)
}

// Strategy picks one endpoint for a request. Pick may update the
// strategy's own state (it learns from its decisions) and must be safe for
// concurrent use.
type Strategy interface {
	Name() string
	Pick(req *Request, eps []Endpoint) (Decision, error)
}

// Forgetter is implemented by strategies that keep per-endpoint state; the
// router calls Forget when an endpoint leaves the pool so memory stays
// bounded and a returning endpoint starts cold.
type Forgetter interface {
	Forget(endpointID string)
}

// Inspector is implemented by strategies that keep per-endpoint cache
// knowledge, for the router's /debug/endpoints. CacheKnowledge returns a
// fresh map the caller owns; it is safe to call concurrently with Pick.
type Inspector interface {
	CacheKnowledge() map[string]Knowledge
}

// Knowledge is what a strategy believes one endpoint caches: Chunks prompt
// chunk hashes held, of at most CapacityChunks.
type Knowledge struct {
	Chunks         int `json:"chunks"`
	CapacityChunks int `json:"capacityChunks"`
}

// ErrNoEndpoint is returned by Pick when eps is empty.
var ErrNoEndpoint = errors.New("strategy: no endpoint available")
