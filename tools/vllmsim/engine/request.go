package engine

import (
	"github.com/warmpath/warmpath/libs/blockhash"
	"github.com/warmpath/warmpath/tools/vllmsim/kvblock"
)

// Status is where a request is in its life.
type Status uint8

// Request states.
const (
	Waiting Status = iota
	Running
	Finished
)

// Request is one generation request. Callers fill the exported input fields
// and hand it to Engine.Add; the engine then owns it and fills Stats.
type Request struct {
	ID     string
	Prompt []uint32
	// MaxTokens is the number of tokens to generate. The simulator has no
	// EOS, so every request generates exactly this many.
	MaxTokens int
	// Extra distinguishes blocks beyond their tokens (cache_salt, LoRA
	// name); it applies to the first block, as in vLLM.
	Extra []string
	// Arrival is when the request reached the engine, in engine seconds.
	Arrival float64
	// Generate picks the i-th output token; nil uses the engine's
	// TokenSource.
	Generate func(i int) uint32

	Stats Stats

	status   Status
	tokens   []uint32 // prompt followed by generated tokens
	output   int      // generated token count
	computed int      // tokens whose KV is in GPU memory
	blocks   []kvblock.ID
	// registered counts leading blocks already registered in the pool.
	registered int
	hashes     []blockhash.Hash
	// load holds tokens to be loaded from external tiers in the next step.
	load [2]int
	// fetchSeconds is the measured network time of load's remote part
	// (0: modelled).
	fetchSeconds float64
	// stored says the prompt's KV was handed to the connector.
	stored bool
}

// Stats records what happened to a request, in engine seconds.
type Stats struct {
	PromptTokens int
	OutputTokens int
	// CachedTokens are prompt tokens found in the GPU prefix cache at
	// first admission (vLLM's prompt_tokens_details.cached_tokens also
	// counts connector hits; see ExternalTokens).
	CachedTokens int
	// ExternalTokens are prompt tokens loaded from LMCache tiers at first
	// admission instead of being prefilled.
	ExternalTokens int
	ExternalCPU    int
	ExternalRemote int
	// FetchSeconds is the measured network time of the remote part (0
	// when the network was modelled).
	FetchSeconds     float64
	Preemptions      int
	QueueSeconds     float64
	FirstScheduled   float64
	FirstToken       float64
	LastToken        float64
	Finished         float64
	PrefillSeconds   float64
	DecodeSeconds    float64
	scheduledOnce    bool
	firstTokenIssued bool
}

// Status returns the request's state.
func (r *Request) Status() Status { return r.status }

// Output returns the tokens generated so far. The slice must not be
// modified.
func (r *Request) Output() []uint32 { return r.tokens[len(r.Prompt):] }

func (r *Request) remaining() int { return len(r.tokens) - r.computed }

// ensureHashes extends r.hashes to cover every full block of known tokens.
func (r *Request) ensureHashes(h *blockhash.Hasher, blockSize int) {
	full := len(r.tokens) / blockSize
	for i := len(r.hashes); i < full; i++ {
		parent := h.None()
		var extra []string
		if i == 0 {
			extra = r.Extra
		} else {
			parent = r.hashes[i-1]
		}
		r.hashes = append(r.hashes, h.Block(parent, r.tokens[i*blockSize:(i+1)*blockSize], extra))
	}
}
