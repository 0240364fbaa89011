// Package engine models a vLLM V1 engine core without a GPU: a scheduler
// doing continuous batching with chunked prefill under max_num_seqs and
// max_num_batched_tokens, a block pool with automatic prefix caching
// (package kvblock), an optional external KV connector (LMCache), and a
// timing model (package timing) that prices each step.
//
// The Engine is a single-threaded core driven by Step(now): it never sleeps
// and never reads a clock, so the same code runs in real time behind the
// simulator's HTTP server and in virtual time inside the benchmark's
// discrete-event mode. Callers serialise access.
package engine

import (
	"errors"
	"fmt"
	"slices"

	"github.com/warmpath/warmpath/libs/blockhash"
	"github.com/warmpath/warmpath/libs/timing"
	"github.com/warmpath/warmpath/tools/vllmsim/kvblock"
)

// Connector is an external KV cache consulted when a request is admitted
// and fed after its prompt is computed — the role LMCache plays through
// vLLM's KV-connector API.
type Connector interface {
	// Lookup returns how many leading tokens of tokens the external cache
	// holds, split by tier; alreadyComputed tokens are in GPU memory.
	Lookup(tokens []uint32, extra []string) Hit
	// Store saves the KV of tokens (a request's prompt) after prefill.
	Store(tokens []uint32, extra []string)
}

// Fetcher is a Connector whose remote tier moves real bytes: the engine
// asks it to fetch a remote hit when it admits the request, and charges
// the time it reports instead of the modelled network time.
type Fetcher interface {
	// FetchRemote fetches the KV of tokens[start:end] from the remote tier
	// and returns where the fetched run ends (end when all arrived, less
	// after a miss or an error) and the network seconds to charge.
	FetchRemote(tokens []uint32, extra []string, start, end int) (fetchedEnd int, seconds float64)
}

// Hit is an external cache lookup result: leading tokens held, by tier.
// CPU tokens come first, then Remote ones continue the prefix.
type Hit struct {
	CPU, Remote int
}

// TokenSource picks the i-th generated token of a request.
type TokenSource func(r *Request, i int) uint32

// Config configures an Engine. Zero fields take vLLM's defaults where it
// has one.
type Config struct {
	BlockSize           int // tokens per KV block (16)
	NumGPUBlocks        int // KV blocks in GPU memory (required)
	MaxNumSeqs          int // running requests per step (256)
	MaxNumBatchedTokens int // tokens per step, prefill and decode (8192)
	MaxModelLen         int // prompt + output limit (required)
	EnablePrefixCaching bool
	Timing              timing.Model
	Hasher              *blockhash.Hasher // required when prefix caching is on
	Connector           Connector         // optional
	Tokens              TokenSource       // optional; deterministic filler by default
}

func (c *Config) setDefaults() error {
	if c.BlockSize == 0 {
		c.BlockSize = 16
	}
	if c.MaxNumSeqs == 0 {
		c.MaxNumSeqs = 256
	}
	if c.MaxNumBatchedTokens == 0 {
		c.MaxNumBatchedTokens = 8192
	}
	switch {
	case c.BlockSize < 1:
		return errors.New("engine: block size must be positive")
	case c.NumGPUBlocks < 1:
		return errors.New("engine: num GPU blocks must be positive")
	case c.MaxNumSeqs < 1 || c.MaxNumBatchedTokens < 1:
		return errors.New("engine: max_num_seqs and max_num_batched_tokens must be positive")
	case c.MaxModelLen < 1:
		return errors.New("engine: max model len must be positive")
	case c.EnablePrefixCaching && c.Hasher == nil:
		return errors.New("engine: prefix caching needs a hasher")
	case c.NumGPUBlocks*c.BlockSize < c.MaxModelLen:
		return fmt.Errorf("engine: %d blocks of %d tokens cannot hold one max-length sequence of %d tokens",
			c.NumGPUBlocks, c.BlockSize, c.MaxModelLen)
	}
	if c.Tokens == nil {
		c.Tokens = fillerToken
	}
	return nil
}

// fillerToken generates a deterministic token from the prompt length and
// position; real callers pass a TokenSource drawing from a vocabulary.
func fillerToken(r *Request, i int) uint32 { return uint32(1000 + (len(r.Prompt)*31+i*7)%5000) }

// Engine is the simulated engine core. It is not safe for concurrent use.
type Engine struct {
	cfg     Config
	pool    *kvblock.Pool
	waiting []*Request
	running []*Request
	byID    map[string]*Request
	// counters since start
	counters Counters
}

// Counters are cumulative engine totals, the sources of vLLM's counters.
type Counters struct {
	PrefixQueries    int // tokens looked up in the GPU prefix cache
	PrefixHits       int // of which found
	ExternalQueries  int // tokens looked up in the connector
	ExternalHits     int // of which found beyond the GPU hit
	PromptTokens     int // prompt tokens of finished prefills
	GenerationTokens int
	Preemptions      int
	Steps            int
}

// New returns an engine with an empty cache.
func New(cfg Config) (*Engine, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	return &Engine{
		cfg:  cfg,
		pool: kvblock.New(cfg.NumGPUBlocks, cfg.BlockSize, cfg.EnablePrefixCaching),
		byID: make(map[string]*Request),
	}, nil
}

// Config returns the engine's effective configuration.
func (e *Engine) Config() Config { return e.cfg }

// Errors returned by Add.
var (
	ErrDuplicateID = errors.New("engine: duplicate request id")
	ErrTooLong     = errors.New("engine: request exceeds max model length")
	ErrEmptyPrompt = errors.New("engine: empty prompt")
)

// Add queues a request. The engine takes ownership of r.
func (e *Engine) Add(r *Request) error {
	switch {
	case len(r.Prompt) == 0:
		return ErrEmptyPrompt
	case r.MaxTokens < 1:
		return errors.New("engine: max tokens must be at least 1")
	case len(r.Prompt)+r.MaxTokens > e.cfg.MaxModelLen:
		return fmt.Errorf("%w: %d prompt + %d output > %d", ErrTooLong, len(r.Prompt), r.MaxTokens, e.cfg.MaxModelLen)
	}
	if _, ok := e.byID[r.ID]; ok {
		return fmt.Errorf("%w %q", ErrDuplicateID, r.ID)
	}
	r.status = Waiting
	r.tokens = append(make([]uint32, 0, len(r.Prompt)+r.MaxTokens), r.Prompt...)
	r.Stats = Stats{PromptTokens: len(r.Prompt)}
	e.byID[r.ID] = r
	e.waiting = append(e.waiting, r)
	return nil
}

// Abort removes a request (a client went away) and frees its blocks. It
// reports whether the request was known and unfinished.
func (e *Engine) Abort(id string) bool {
	r, ok := e.byID[id]
	if !ok {
		return false
	}
	e.finish(r)
	e.waiting = slices.DeleteFunc(e.waiting, func(x *Request) bool { return x == r })
	e.running = slices.DeleteFunc(e.running, func(x *Request) bool { return x == r })
	return true
}

// HasWork reports whether a Step would do anything.
func (e *Engine) HasWork() bool { return len(e.waiting)+len(e.running) > 0 }

// NumRunning and NumWaiting are vLLM's num_requests_running/waiting.
func (e *Engine) NumRunning() int { return len(e.running) }

// NumWaiting returns the number of queued requests, preempted ones included.
func (e *Engine) NumWaiting() int { return len(e.waiting) }

// KVCacheUsage is vLLM's kv_cache_usage_perc (0..1).
func (e *Engine) KVCacheUsage() float64 { return e.pool.Usage() }

// Counters returns cumulative totals.
func (e *Engine) Counters() Counters { return e.counters }

// Pool exposes the block pool for inspection (tests, debug endpoints).
func (e *Engine) Pool() *kvblock.Pool { return e.pool }

// ResetPrefixCache drops every cached block if none is in use.
func (e *Engine) ResetPrefixCache() bool { return e.pool.Reset() }

// Output is what one step produced for one request.
type Output struct {
	Request *Request
	// Token is the token generated this step; valid when HasToken.
	Token    uint32
	HasToken bool
	First    bool // Token is the request's first generated token
	Finished bool
	// SincePrev is the time since the request's previous token (inter-token
	// latency); 0 for the first token.
	SincePrev float64
}

// StepResult describes one step.
type StepResult struct {
	Start, Duration float64
	Outputs         []Output
	// Events are the KV-cache events of this step, in order.
	Events         []kvblock.Event
	PrefillTokens  int
	DecodeTokens   int
	LoadedTokens   int
	ScheduledSeqs  int
	PreemptedSeqs  int
	FinishedPrompt []*Request // requests whose prompt finished this step
}

type scheduled struct {
	r *Request
	n int
}

// Step schedules and runs one engine iteration starting at now (engine
// seconds) and returns what it produced; Duration is 0 when there was
// nothing to do. Tokens it generates exist at now+Duration.
func (e *Engine) Step(now float64) StepResult {
	res := StepResult{Start: now}
	batch, preempted := e.schedule(now)
	res.PreemptedSeqs = preempted
	if len(batch) == 0 {
		res.Events = e.pool.TakeEvents()
		return res
	}
	e.counters.Steps++
	var tb timing.Batch
	for _, s := range batch {
		r := s.r
		tb.LoadTokens[timing.TierCPU] += r.load[timing.TierCPU]
		if r.fetchSeconds > 0 {
			// Measured: only the PCIe copy is modelled.
			tb.LoadTokens[timing.TierCPU] += r.load[timing.TierRemote]
			tb.FetchSeconds += r.fetchSeconds
		} else {
			tb.LoadTokens[timing.TierRemote] += r.load[timing.TierRemote]
		}
		res.LoadedTokens += r.load[timing.TierCPU] + r.load[timing.TierRemote]
		r.load = [2]int{}
		r.fetchSeconds = 0
		if r.computed >= len(r.Prompt) && s.n == 1 {
			tb.DecodeContexts = append(tb.DecodeContexts, r.computed)
			res.DecodeTokens++
		} else {
			tb.Prefill = append(tb.Prefill, timing.Chunk{Start: r.computed, N: s.n})
			res.PrefillTokens += s.n
		}
	}
	res.Duration = e.cfg.Timing.StepSeconds(tb)
	end := now + res.Duration
	res.ScheduledSeqs = len(batch)

	for _, s := range batch {
		r := s.r
		inPrefill := r.computed < len(r.Prompt)
		r.computed += s.n
		if inPrefill {
			r.Stats.PrefillSeconds += res.Duration
		} else {
			r.Stats.DecodeSeconds += res.Duration
		}
		e.register(r)
		if r.computed >= len(r.Prompt) && !r.stored {
			r.stored = true
			e.counters.PromptTokens += len(r.Prompt)
			res.FinishedPrompt = append(res.FinishedPrompt, r)
			if e.cfg.Connector != nil {
				e.cfg.Connector.Store(r.Prompt, r.Extra)
			}
		}
		if r.computed < len(r.tokens) {
			continue // chunked prefill not done yet
		}
		var tok uint32
		if r.Generate != nil {
			tok = r.Generate(r.output)
		} else {
			tok = e.cfg.Tokens(r, r.output)
		}
		r.tokens = append(r.tokens, tok)
		r.output++
		e.counters.GenerationTokens++
		out := Output{Request: r, Token: tok, HasToken: true}
		if !r.Stats.firstTokenIssued {
			r.Stats.firstTokenIssued = true
			r.Stats.FirstToken = end
			out.First = true
		} else {
			out.SincePrev = end - r.Stats.LastToken
		}
		r.Stats.LastToken = end
		r.Stats.OutputTokens = r.output
		if r.output >= r.MaxTokens {
			r.Stats.Finished = end
			out.Finished = true
			e.finish(r)
		}
		res.Outputs = append(res.Outputs, out)
	}
	e.running = slices.DeleteFunc(e.running, func(r *Request) bool { return r.status == Finished })
	res.Events = e.pool.TakeEvents()
	return res
}

// schedule picks this step's work, vLLM V1 style: running requests first
// (decodes and unfinished prefill chunks), preempting the newest running
// request when blocks run out, then waiting requests in arrival order while
// the token budget, max_num_seqs and free blocks allow.
func (e *Engine) schedule(now float64) ([]scheduled, int) {
	budget := e.cfg.MaxNumBatchedTokens
	var batch []scheduled
	preempted := 0
	for i := 0; i < len(e.running) && budget > 0; i++ {
		r := e.running[i]
		n := min(r.remaining(), budget)
		ok := true
		for !e.allocate(r, r.computed+n) {
			victim := e.running[len(e.running)-1]
			e.running = e.running[:len(e.running)-1]
			e.preempt(victim)
			preempted++
			if victim == r {
				ok = false
				break
			}
		}
		if !ok {
			break
		}
		batch = append(batch, scheduled{r: r, n: n})
		budget -= n
	}
	if preempted > 0 {
		return batch, preempted
	}
	for len(e.waiting) > 0 && budget > 0 && len(e.running) < e.cfg.MaxNumSeqs {
		r := e.waiting[0]
		hitBlocks, hit := e.lookup(r)
		n := min(len(r.tokens)-len(hitBlocks)*e.cfg.BlockSize-hit.CPU-hit.Remote, budget)
		if !e.admit(r, hitBlocks, hit, n) {
			break // not enough blocks; retry next step
		}
		if loaded := e.fetch(r, hit); loaded.Remote < hit.Remote {
			// What did not arrive is computed, in blocks already held.
			n = min(n+hit.Remote-loaded.Remote, budget)
			hit = loaded
		}
		e.waiting = e.waiting[1:]
		r.status = Running
		if !r.Stats.scheduledOnce {
			r.Stats.scheduledOnce = true
			r.Stats.FirstScheduled = now
			r.Stats.QueueSeconds = now - r.Arrival
			r.Stats.CachedTokens = r.computed - hit.CPU - hit.Remote
			r.Stats.ExternalTokens = hit.CPU + hit.Remote
			r.Stats.ExternalCPU, r.Stats.ExternalRemote = hit.CPU, hit.Remote
			r.Stats.FetchSeconds = r.fetchSeconds
		}
		e.running = append(e.running, r)
		batch = append(batch, scheduled{r: r, n: n})
		budget -= n
	}
	return batch, preempted
}

// lookup finds a waiting request's GPU prefix hit and its external hit
// beyond it, without taking or fetching anything. At least one token is always left to
// compute, as vLLM needs logits for the last position.
func (e *Engine) lookup(r *Request) ([]kvblock.ID, Hit) {
	bs := e.cfg.BlockSize
	limit := len(r.tokens) - 1
	var hitBlocks []kvblock.ID
	if e.cfg.EnablePrefixCaching {
		r.ensureHashes(e.cfg.Hasher, bs)
		hitBlocks = e.pool.Lookup(r.hashes[:min(len(r.hashes), limit/bs)])
	}
	var hit Hit
	if e.cfg.Connector != nil {
		gpu := len(hitBlocks) * bs
		ext := e.cfg.Connector.Lookup(r.tokens, r.Extra)
		// Only what extends past the GPU hit is loaded; CPU first.
		cpuEnd := min(ext.CPU, limit)
		remoteEnd := min(ext.CPU+ext.Remote, limit)
		hit.CPU = max(cpuEnd-gpu, 0)
		hit.Remote = max(remoteEnd-max(cpuEnd, gpu), 0)
	}
	return hitBlocks, hit
}

// fetch moves an admitted request's remote hit for real when the connector
// can (Fetcher): only now, once the request holds its blocks, as vLLM
// loads KV only for scheduled requests. The request's computed count drops
// back to where the fetch stopped. It returns the hit as loaded.
func (e *Engine) fetch(r *Request, hit Hit) Hit {
	r.fetchSeconds = 0
	f, ok := e.cfg.Connector.(Fetcher)
	if !ok || hit.Remote == 0 {
		return hit
	}
	start := r.computed - hit.Remote
	end, secs := f.FetchRemote(r.tokens, r.Extra, start, r.computed)
	got := max(min(end, r.computed)-start, 0)
	short := hit.Remote - got
	r.computed -= short
	r.load[1] = got
	e.counters.ExternalHits -= short
	hit.Remote = got
	if got > 0 {
		r.fetchSeconds = secs
	}
	return hit
}

// admit takes the request's prefix-hit blocks and allocates blocks for the
// loaded and n newly computed tokens. When blocks are short it changes
// nothing and reports false; the lookup is redone next step because the
// hit blocks may be evicted meanwhile.
func (e *Engine) admit(r *Request, hitBlocks []kvblock.ID, hit Hit, n int) bool {
	bs := e.cfg.BlockSize
	gpu := len(hitBlocks) * bs
	end := gpu + hit.CPU + hit.Remote + n
	need := ceilDiv(end, bs) - len(hitBlocks)
	// Touching free cached blocks takes them out of the free queue too.
	if need > e.pool.NumFree()-e.pool.FreeAmong(hitBlocks) {
		return false
	}
	e.pool.Touch(hitBlocks)
	fresh, err := e.pool.Allocate(need)
	if err != nil {
		panic("engine: allocation failed after capacity check: " + err.Error())
	}
	r.blocks = append(slices.Clip(hitBlocks), fresh...)
	r.registered = len(hitBlocks)
	// Loaded tokens fill their blocks now and are registered when the step ends.
	r.computed = gpu + hit.CPU + hit.Remote
	r.load = [2]int{hit.CPU, hit.Remote}
	if e.cfg.EnablePrefixCaching {
		e.counters.PrefixQueries += len(r.tokens)
		e.counters.PrefixHits += gpu
	}
	if e.cfg.Connector != nil {
		e.counters.ExternalQueries += len(r.tokens) - gpu
		e.counters.ExternalHits += hit.CPU + hit.Remote
	}
	return true
}

// allocate makes sure r has blocks for its first upto tokens.
func (e *Engine) allocate(r *Request, upto int) bool {
	need := ceilDiv(upto, e.cfg.BlockSize) - len(r.blocks)
	if need <= 0 {
		return true
	}
	fresh, err := e.pool.Allocate(need)
	if err != nil {
		return false
	}
	r.blocks = append(r.blocks, fresh...)
	return true
}

// register records every newly full, computed block of r in the prefix cache.
func (e *Engine) register(r *Request) {
	if !e.cfg.EnablePrefixCaching {
		return
	}
	bs := e.cfg.BlockSize
	full := r.computed / bs
	if full <= r.registered {
		return
	}
	r.ensureHashes(e.cfg.Hasher, bs)
	var parent *blockhash.Hash
	if r.registered > 0 {
		p := r.hashes[r.registered-1]
		parent = &p
	}
	e.pool.Register(r.blocks[r.registered:full], r.hashes[r.registered:full], parent, r.tokens[r.registered*bs:full*bs])
	r.registered = full
}

// preempt returns r to the front of the queue, freeing its blocks; its
// generated tokens are kept and recomputed on readmission (vLLM's
// recompute preemption).
func (e *Engine) preempt(r *Request) {
	e.release(r)
	r.status = Waiting
	r.Stats.Preemptions++
	e.counters.Preemptions++
	e.waiting = append([]*Request{r}, e.waiting...)
}

func (e *Engine) finish(r *Request) {
	e.release(r)
	r.status = Finished
	delete(e.byID, r.ID)
}

func (e *Engine) release(r *Request) {
	if len(r.blocks) > 0 && r.status == Running {
		rev := slices.Clone(r.blocks)
		slices.Reverse(rev)
		e.pool.Free(rev)
	}
	r.blocks = nil
	r.computed = 0
	r.registered = 0
	r.load = [2]int{}
	r.fetchSeconds = 0
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }
