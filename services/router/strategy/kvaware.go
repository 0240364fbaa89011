package strategy

import (
	"math"
	"slices"
	"sync"
	"time"

	"github.com/warmpath/warmpath/libs/timing"
	"github.com/warmpath/warmpath/services/router/kvindex"
)

// KVAwareConfig configures kvaware. In a file:
//
//	kvAware: {timing: llama-3.1-8b-h100, loadTokens: 256, queueWeight: 0.25, predictionTTLSeconds: 2, defaultBlockSize: 16}
type KVAwareConfig struct {
	// Timing names the engine cost model of the fleet's model and GPU (a
	// libs/timing preset; "" is timing.DefaultPreset). Unless weights are
	// set, a cached block is credited with the share of its prefill
	// compute its tier saves, from that model and the prompt's length: a
	// GPU hit saves it all; an L1 (CPU) hit pays a PCIe copy (8B on an
	// H100: 0.89-0.90 of it); an L2 hit pays the network too (0.60-0.64).
	// Longer prompts are dearer to compute per token (attention) but no
	// dearer to load, so their cached blocks save a larger share.
	Timing string `json:"timing" yaml:"timing"`
	// GPUWeight, CPUWeight and L2Weight, when any is set, replace the
	// derived credits with fixed shares (0..1, GPU >= CPU >= L2).
	GPUWeight float64 `json:"gpuWeight,omitempty" yaml:"gpuWeight,omitempty"`
	CPUWeight float64 `json:"cpuWeight,omitempty" yaml:"cpuWeight,omitempty"`
	L2Weight  float64 `json:"l2Weight,omitempty" yaml:"l2Weight,omitempty"`
	// LoadTokens prices one request running or queued at a worker in
	// prompt tokens still to prefill, so load and cache trade off in one
	// cost.
	LoadTokens float64 `json:"loadTokens" yaml:"loadTokens"`
	// QueueWeight prices the prompt tokens the router sent a worker that
	// it has not begun answering (Endpoint.PendingPrefill): a new
	// request's prefill waits behind them, so 1 would make the cost the
	// request's own estimated time to first token, in tokens. The default,
	// 0.25, leans towards cache affinity, because a request sent away from
	// its busy cache also copies its prefix onto a second worker, evicting
	// what later requests would have hit there: on the shipped trace (8
	// workers) it cut kvaware's TTFT p90 from -25% to -31% against round
	// robin and lifted its hit rate, where 1 cut TTFT as far but lost 8
	// points of hit rate (docs/benchmarks.md). The share of a prompt the
	// shared L2 holds needs no such lean (any worker fetches it), so the
	// weight rises towards 1 with it. Negative turns it off; 0 takes the
	// default.
	QueueWeight float64 `json:"queueWeight" yaml:"queueWeight"`
	// PredictionTTL is how long a routed request's blocks count as cached
	// on its worker before the worker's own events confirm them, so a burst
	// of siblings lands together.
	PredictionTTLSeconds float64 `json:"predictionTTLSeconds" yaml:"predictionTTLSeconds"`
	// DefaultBlockSize is used for workers whose block size is not scraped
	// yet.
	DefaultBlockSize int `json:"defaultBlockSize" yaml:"defaultBlockSize"`
	// MaxPredictions bounds the predicted blocks kept.
	MaxPredictions int `json:"maxPredictions" yaml:"maxPredictions"`
	// AffinityTokens widens the load guard for a worker whose caches save
	// this prompt more than any worker the guard admits anyway would: one
	// more request of slack per AffinityTokens tokens of that lead, up to
	// MaxAffinitySlack requests. The lead is net of each worker's pending
	// prefill (PendingPrefill, at full weight), which the prompt would
	// wait behind. Following a long cached document to a busier worker
	// beats prefilling it again elsewhere; a prefix an admitted worker
	// holds too (a shared system prompt, a context a burst already spread)
	// leads nowhere and widens nothing, so it cannot pin a fleet's traffic
	// on one worker. On the shipped trace (8 workers, store-only L1
	// events) it took kvaware's TTFT p90 cut from 82% to 92% of the
	// oracle's (docs/benchmarks.md). Negative turns it off; 0 takes the
	// default, 4096.
	AffinityTokens float64 `json:"affinityTokens" yaml:"affinityTokens"`
	// MaxAffinitySlack bounds that slack, in requests (0: the default, 1).
	MaxAffinitySlack float64 `json:"maxAffinitySlack" yaml:"maxAffinitySlack"`
}

func (c KVAwareConfig) withDefaults() KVAwareConfig {
	if c.Timing == "" {
		c.Timing = timing.DefaultPreset
	}
	if c.LoadTokens == 0 {
		c.LoadTokens = 256
	}
	if c.QueueWeight == 0 {
		c.QueueWeight = 0.25
	}
	if c.PredictionTTLSeconds == 0 {
		c.PredictionTTLSeconds = 2
	}
	if c.DefaultBlockSize == 0 {
		c.DefaultBlockSize = 16
	}
	if c.MaxPredictions == 0 {
		c.MaxPredictions = 1 << 16
	}
	if c.AffinityTokens == 0 {
		c.AffinityTokens = 4096
	}
	if c.MaxAffinitySlack == 0 {
		c.MaxAffinitySlack = 1
	}
	return c
}

// derived says the tier credits come from the timing model: no weight is
// set.
func (c KVAwareConfig) derived() bool {
	return c.GPUWeight == 0 && c.CPUWeight == 0 && c.L2Weight == 0
}

func (c KVAwareConfig) validate() error {
	if _, err := timingModel(c.Timing); err != nil {
		return errorf("kvAware.timing: %v", err)
	}
	for _, w := range []struct {
		name string
		v    float64
	}{{"gpuWeight", c.GPUWeight}, {"cpuWeight", c.CPUWeight}, {"l2Weight", c.L2Weight}} {
		if !finiteNonNegative(w.v) || w.v > 1 {
			return errorf("kvAware.%s must be between 0 and 1, got %v", w.name, w.v)
		}
	}
	if c.CPUWeight > c.GPUWeight || c.L2Weight > c.CPUWeight {
		return errorf("kvAware weights must not grow with slower tiers: gpuWeight >= cpuWeight >= l2Weight")
	}
	if math.IsNaN(c.QueueWeight) || math.IsInf(c.QueueWeight, 0) {
		return errorf("kvAware.queueWeight must be a finite number, got %v", c.QueueWeight)
	}
	if math.IsNaN(c.AffinityTokens) || math.IsInf(c.AffinityTokens, 0) || !finiteNonNegative(c.MaxAffinitySlack) {
		return errorf("kvAware.affinityTokens must be a finite number and maxAffinitySlack a finite number >= 0")
	}
	if !finiteNonNegative(c.LoadTokens) {
		return errorf("kvAware.loadTokens must be a finite number >= 0, got %v", c.LoadTokens)
	}
	if !finiteNonNegative(c.PredictionTTLSeconds) || c.DefaultBlockSize < 1 || c.MaxPredictions < 0 {
		return errorf("kvAware.predictionTTLSeconds and maxPredictions must not be negative, defaultBlockSize must be >= 1")
	}
	return nil
}

// KVAware routes each request to the worker whose caches hold most of its
// prompt, priced by tier, plus a load term — through the shared load
// guard, so a popular prefix cannot pin all traffic to one worker. It
// reads the exact index the workers' KV events maintain; a request without
// token ids (the tokenizer failed) is routed by prefixaware instead.
type KVAware struct {
	cfg      KVAwareConfig
	timing   timing.Model // prices the tiers when cfg.derived()
	idx      BlockIndex
	guard    LoadGuard
	fallback *PrefixAware
	notes    PrefillObserver // passed the prefills it hears of; nil: none
	l2       L2View          // nil: the L2 is known from workers' events only
	now      func() time.Time

	preds *Predictions // blocks routed requests are computing

	mu sync.Mutex
	// blockSizes is the block size each worker's Decision.Keys were last
	// computed at, for the L2 learner, which hears only keys back.
	blockSizes map[string]int
	// placed is the prompt tokens each worker was sent to compute: the new
	// content its caches took, which fills breaks ties by.
	placed map[string]float64
}

// BlockIndex is the KV index kvaware reads: the in-memory kvindex.Index
// or a shared one (kvredis).
type BlockIndex interface {
	Lookup(keys []uint64, workers []string, out []kvindex.Match) []kvindex.Match
	Stats() kvindex.Stats
}

// L2View is the shared L2's own account of what it holds.
type L2View interface {
	// Leading returns how many leading tokens of a prompt for model and
	// LoRA adapter (lora; "" for the base model) the L2 holds, in whole
	// chunks; 0 when it holds none or is not known.
	Leading(model, lora string, tokens []uint32) int
	// ChunkTokens is the L2's chunk size in tokens: a prompt shorter
	// than one chunk has nothing the L2 could hold.
	ChunkTokens() int
}

// L2Learner is an L2View that learns from prefills: an L2 that says
// nothing of what it holds (Redis), whose view takes every prefilled
// prompt's whole chunks as written through to it (l2learn).
type L2Learner interface {
	L2View
	// Learn takes a prefilled prompt's block keys, at block tokens each.
	Learn(keys []uint64, block int)
}

// NewKVAware returns kvaware over idx; fallback routes requests without
// token ids.
func NewKVAware(cfg KVAwareConfig, guard LoadGuardConfig, idx BlockIndex, fallback *PrefixAware) *KVAware {
	cfg = cfg.withDefaults()
	tm, err := timingModel(cfg.Timing)
	if err != nil { // validate rejected it already; a caller that skipped it gets the default
		tm, _ = timingModel(timing.DefaultPreset)
	}
	k := &KVAware{cfg: cfg, timing: tm, idx: idx, guard: NewLoadGuard(guard), fallback: fallback, now: time.Now, blockSizes: map[string]int{}, placed: map[string]float64{}}
	k.usePredictions(NewPredictions())
	return k
}

// SetReplicas passes the replica count to the PrefixAware fallback, which
// routes requests without token ids and learns only from this replica's
// decisions. kvaware's own placement needs no share: it reads the KV
// index, which every replica builds from all workers' events, so each
// sees the whole of every worker's cache whoever placed what in it.
func (k *KVAware) SetReplicas(n int) { k.fallback.SetReplicas(n) }

// SetClock replaces the clock predictions expire by; the benchmark's
// discrete-event mode runs kvaware in virtual time. Call it before Pick.
func (k *KVAware) SetClock(now func() time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.now = now
}

// usePredictions makes p the predictions kvaware reads and adds to,
// bounded by its configuration.
func (k *KVAware) usePredictions(p *Predictions) {
	p.setMax(k.cfg.MaxPredictions)
	k.preds = p
}

// Name implements Strategy.
func (*KVAware) Name() string { return NameKVAware }

// WantsTokens says the router should tokenize requests for this strategy.
func (*KVAware) WantsTokens() bool { return true }

// Pick implements Strategy.
func (k *KVAware) Pick(req *Request, eps []Endpoint) (Decision, error) {
	if len(eps) == 0 {
		return Decision{}, ErrNoEndpoint
	}
	if len(req.TokenIDs) == 0 {
		d, err := k.fallback.Pick(req, eps)
		if err == nil {
			d.Fallback = FallbackNoTokens
		}
		return d, err
	}
	seed := kvindex.Seed(req.Model, req.LoRA)
	bySize, names := k.keysBySize(seed, req.TokenIDs, eps)
	matches := make([]kvindex.Match, len(eps))
	blocks := make([]int, len(eps))
	var ms []kvindex.Match
	now := k.now()
	for bs, g := range bySize {
		sub := make([]string, len(g.workers))
		for j, i := range g.workers {
			sub[j] = names[i]
		}
		ms = k.idx.Lookup(g.keys, sub, ms)
		for j, i := range g.workers {
			m := ms[j]
			// Predictions count as GPU blocks the worker is computing now.
			if p := k.preds.leading(g.keys, names[i], now); p > m.GPU {
				m.GPU, m.Local, m.Any = p, max(m.Local, p), max(m.Any, p)
			}
			matches[i] = m
			blocks[i] = bs
		}
	}
	l2 := 0 // leading tokens the shared L2 holds
	if k.l2 != nil {
		// The L2 serves every worker alike: a worker holding less of the
		// prompt locally fetches the rest from it instead of computing it.
		if l2 = k.l2.Leading(req.Model, req.LoRA, req.TokenIDs); l2 > 0 {
			for i := range matches {
				if b := l2 / blocks[i]; b > matches[i].Any {
					matches[i].Any = b
				}
			}
		}
	}
	n := max(len(req.TokenIDs), req.PromptTokens) // the whole prompt's length, when TokenIDs are its head
	tokens := float64(n)
	// The lean towards affinity spares the fleet a second prefill of what
	// only its holder caches; the share of the prompt the L2 holds costs
	// any worker a fetch instead, so the queue ahead of it is priced at
	// full weight, as the time the request would wait.
	queueWeight := max(k.cfg.QueueWeight, 0)
	if l2 > 0 && queueWeight > 0 {
		share := min(float64(l2)/tokens, 1)
		queueWeight += (1 - queueWeight) * share
	}
	gw, cw, lw := k.weights(n)
	credits := make([]float64, len(eps))
	for i, m := range matches {
		bs := float64(blocks[i])
		credits[i] = min(tokens, bs*(gw*float64(m.GPU)+cw*float64(m.Local-m.GPU)+lw*float64(m.Any-m.Local)))
	}
	fill := k.fills(eps)
	cost := func(i int) float64 {
		return tokens - credits[i] + queueWeight*float64(eps[i].PendingPrefill) + k.cfg.LoadTokens*eps[i].Load() + fill[i]
	}
	var slack func(i int) float64
	if k.cfg.AffinityTokens > 0 {
		// The lead is over the best worker the guard admits anyway, each
		// net of the prefill it has queued: when one of those holds the
		// prompt too, or the holder is busy prefilling, there is nothing
		// to follow.
		limit, admitted := k.guard.LimitFor(eps), math.Inf(-1)
		net := func(i int) float64 { return credits[i] - float64(eps[i].PendingPrefill) }
		for i := range eps {
			if eps[i].Load() <= limit {
				admitted = max(admitted, net(i))
			}
		}
		slack = func(i int) float64 {
			return min(k.cfg.MaxAffinitySlack, math.Floor((net(i)-admitted)/k.cfg.AffinityTokens))
		}
	}
	// Ties (nothing cached anywhere, equal load) are broken by a hash of
	// the prompt's first block, so different prompts spread over the tied
	// workers while one prompt's siblings agree.
	tie := seed ^ uint64(len(req.TokenIDs))
	for _, g := range bySize {
		if len(g.keys) > 0 {
			tie = g.keys[0]
		}
		break
	}
	best := k.guard.ChooseWithSlack(eps, tie, func(i int) float64 { return -cost(i) }, slack)
	g := bySize[blocks[best]]
	if g == nil { // blocks[best] is 0 only when bySize was empty, which eps rules out
		g = &sized{}
	}
	if ttl := time.Duration(k.cfg.PredictionTTLSeconds * float64(time.Second)); ttl > 0 {
		k.preds.add(g.keys, eps[best].ID, now, now.Add(ttl))
	}
	m := matches[best]
	d := Decision{Endpoint: eps[best].ID, Strategy: NameKVAware, MatchedChunks: m.Any, TotalChunks: len(g.keys),
		TierBlocks: [3]int{m.GPU, m.Local - m.GPU, m.Any - m.Local}, BlockSize: blocks[best]}
	if _, learns := k.l2.(L2Learner); k.notes != nil || learns {
		d.Keys = g.keys
		if learns {
			k.mu.Lock()
			k.blockSizes[eps[best].ID] = blocks[best]
			k.mu.Unlock()
		}
	}
	if d.TotalChunks > 0 {
		d.MatchRatio = float64(d.MatchedChunks) / float64(d.TotalChunks)
	}
	// The worker's work before the first token: what no cache holds, and
	// the loads from L1 and L2 at what they cost of a prefill, so a
	// worker busy fetching a long document from the L2 is not taken for
	// idle by the next request.
	d.PrefillTokens = int(math.Ceil(tokens - credits[best]))
	if d.TotalChunks > 0 && !slices.ContainsFunc(matches, func(m kvindex.Match) bool { return m.Any > 0 }) {
		d.Fallback = FallbackNoPrefixCached
	}
	k.mu.Lock()
	k.placed[eps[best].ID] += float64(max(n-matches[best].Any*blocks[best], 0))
	k.mu.Unlock()
	return d, nil
}

// sized are a prompt's block keys at one block size and the workers (by
// index) that use it.
type sized struct {
	keys    []uint64
	workers []int
}

// keysBySize computes the block keys of tokens once per distinct block
// size among eps (a fleet's workers share one), and lists eps' IDs.
func (k *KVAware) keysBySize(seed uint64, tokens []uint32, eps []Endpoint) (map[int]*sized, []string) {
	bySize := map[int]*sized{}
	names := make([]string, len(eps))
	for i := range eps {
		names[i] = eps[i].ID
		bs := eps[i].BlockSize
		if bs <= 0 {
			bs = k.cfg.DefaultBlockSize
		}
		g := bySize[bs]
		if g == nil {
			g = &sized{keys: kvindex.AppendKeys(nil, seed, tokens, bs)}
			bySize[bs] = g
		}
		g.workers = append(g.workers, i)
	}
	return bySize, names
}

// Cold implements HeadRouter: no worker holds, is computing or can fetch
// from the L2 the first block of the prompt req.TokenIDs begin. Then every
// worker's credit for the whole prompt is 0 (matches count leading
// blocks), and Pick on the head chooses as it would on the whole. A head
// shorter than a block, or than an L2 chunk, proves nothing.
func (k *KVAware) Cold(req *Request, eps []Endpoint) bool {
	if len(eps) == 0 || len(req.TokenIDs) == 0 {
		return false
	}
	if k.l2 != nil {
		if len(req.TokenIDs) < k.l2.ChunkTokens() || k.l2.Leading(req.Model, req.LoRA, req.TokenIDs) > 0 {
			return false
		}
	}
	bySize, names := k.keysBySize(kvindex.Seed(req.Model, req.LoRA), req.TokenIDs, eps)
	now := k.now()
	var ms []kvindex.Match
	for _, g := range bySize {
		if len(g.keys) == 0 {
			return false
		}
		first := g.keys[:1]
		sub := make([]string, len(g.workers))
		for j, i := range g.workers {
			sub[j] = names[i]
			if k.preds.leading(first, names[i], now) > 0 {
				return false
			}
		}
		ms = k.idx.Lookup(first, sub, ms)
		for _, m := range ms {
			if m.Any > 0 {
				return false
			}
		}
	}
	return true
}

// Completed implements HeadRouter: d was chosen on the head of the prompt
// whose whole ids req.TokenIDs now holds. Its worker is computing all of
// it, so the whole prompt's blocks are predicted there (siblings arriving
// while it prefills follow it), the content placed is corrected from the
// estimate, and the decision's Keys become the whole prompt's.
func (k *KVAware) Completed(req *Request, d Decision, estimate int) Decision {
	if d.Endpoint == "" || len(req.TokenIDs) == 0 {
		return d
	}
	bs := d.BlockSize
	if bs <= 0 {
		bs = k.cfg.DefaultBlockSize
	}
	keys := kvindex.AppendKeys(nil, kvindex.Seed(req.Model, req.LoRA), req.TokenIDs, bs)
	now := k.now()
	if ttl := time.Duration(k.cfg.PredictionTTLSeconds * float64(time.Second)); ttl > 0 {
		k.preds.add(keys, d.Endpoint, now, now.Add(ttl))
	}
	d.TotalChunks = len(keys)
	if d.TotalChunks > 0 {
		d.MatchRatio = float64(d.MatchedChunks) / float64(d.TotalChunks)
	}
	if d.Keys != nil {
		d.Keys = keys
	}
	k.mu.Lock()
	if _, ok := k.placed[d.Endpoint]; ok { // not forgotten meanwhile
		k.placed[d.Endpoint] = max(k.placed[d.Endpoint]+float64(len(req.TokenIDs)-estimate), 0)
	}
	k.mu.Unlock()
	return d
}

// fills are a cost below half a token for each worker, growing with the
// prompt tokens it was sent to compute: among workers whose costs are
// otherwise equal (a prompt nothing caches, an idle fleet) the one whose
// caches took the least new content takes it. Left to the tie-break's
// hash, new documents pile up by chance (five of twelve on one of four
// workers) past what that worker's caches hold, and their follow-ups miss.
func (k *KVAware) fills(eps []Endpoint) []float64 {
	out := make([]float64, len(eps))
	k.mu.Lock()
	defer k.mu.Unlock()
	most := 0.0
	for i := range eps {
		out[i] = k.placed[eps[i].ID]
		most = max(most, out[i])
	}
	for i := range out {
		out[i] = 0.5 * out[i] / (most + 1)
	}
	return out
}

// weights are the shares of a cached block's prefill the GPU, L1 and L2
// tiers save for a prompt of n tokens: fixed when configured, else from
// the timing model.
func (k *KVAware) weights(n int) (gpu, cpu, l2 float64) {
	if !k.cfg.derived() {
		return k.cfg.GPUWeight, k.cfg.CPUWeight, k.cfg.L2Weight
	}
	return 1, k.timing.SavedShare(timing.TierCPU, n), k.timing.SavedShare(timing.TierRemote, n)
}

// timingModel is the cost model of a libs/timing preset.
func timingModel(preset string) (timing.Model, error) {
	p, err := timing.Lookup(preset)
	if err != nil {
		return timing.Model{}, err
	}
	return timing.NewModel(p)
}

// Prefilled implements PrefillObserver: the worker finished the prefill
// of a prompt kvaware sent it. That is when LMCache stores the prompt's
// new chunks and touches the ones it held, so the index's views of tiers
// that do not report evictions take the use then, in LMCache's order.
func (k *KVAware) Prefilled(worker string, keys []uint64) {
	if len(keys) == 0 {
		return
	}
	if k.notes != nil {
		k.notes.Prefilled(worker, keys)
	}
	if l, ok := k.l2.(L2Learner); ok {
		k.mu.Lock()
		block := k.blockSizes[worker]
		k.mu.Unlock()
		l.Learn(keys, block)
	}
}

// Forget implements Forgetter.
func (k *KVAware) Forget(endpointID string) {
	k.fallback.Forget(endpointID)
	k.preds.Forget(endpointID)
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.blockSizes, endpointID)
	delete(k.placed, endpointID)
}

// CacheKnowledge implements Inspector: blocks indexed per worker (all
// tiers), of the worker's GPU capacity.
func (k *KVAware) CacheKnowledge() map[string]Knowledge {
	st := k.idx.Stats()
	out := make(map[string]Knowledge, len(st.Blocks))
	for w, b := range st.Blocks {
		out[w] = Knowledge{Chunks: b[kvindex.GPU] + b[kvindex.CPU] + b[kvindex.L2]}
	}
	return out
}

// TokenUser is implemented by strategies that route on token ids; the
// router tokenizes requests for them.
type TokenUser interface {
	WantsTokens() bool
}

// HeadRouter is a TokenUser that can route a long prompt on its head (its
// first token ids, Request.PromptTokens estimating the whole) when the
// head shows the prompt is new to every worker: the request then does not
// wait for the rest to be encoded, which for a long document nothing
// caches is the router's whole cost (an 8K-token one: 2.6 ms on two
// cores). The router hands the whole prompt over once it is encoded.
type HeadRouter interface {
	TokenUser
	// Cold says no worker holds or is computing the block req.TokenIDs
	// (the head) begins with, so Pick on the head alone chooses as it
	// would on the whole prompt.
	Cold(req *Request, eps []Endpoint) bool
	// Completed takes the whole prompt's ids (req.TokenIDs) for d, which
	// Pick made on the head with estimate as Request.PromptTokens, and
	// returns d as if made on the whole (its Keys, TotalChunks).
	Completed(req *Request, d Decision, estimate int) Decision
}
