package strategy

import (
	"sync"
	"time"

	"github.com/warmpath/warmpath/libs/timing"
	"github.com/warmpath/warmpath/services/router/kvindex"
)

// KVAwareConfig configures kvaware. In a file:
//
//	kvAware: {timingPreset: llama-3.1-8b-h100, delayedRequests: 3, predictionTTLSeconds: 2, defaultBlockSize: 16}
type KVAwareConfig struct {
	// TimingPreset names the engine cost model kvaware prices a decision
	// with (libs/timing: the model and GPU the workers run; the simulator
	// runs on the same model): how long the prompt's uncached part takes to
	// prefill, its L1 and L2 parts to load, and the work queued ahead of it
	// to clear. Default llama-3.1-8b-h100.
	TimingPreset string `json:"timingPreset" yaml:"timingPreset"`
	// DelayedRequests is how many later requests each second of prefill
	// sent to a worker is taken to delay, besides the request's own: the
	// work a cache saves counts (1 + DelayedRequests) times, the queue
	// ahead once. A request's own time to first token is the queue ahead
	// plus its prefill; the fleet's also holds every request that queues
	// behind that prefill, and a prompt sent away from its cache copies its
	// prefix onto a second worker, evicting what later requests would hit
	// there. Default 3 (the work saved weighs four times the queue, the
	// lean of the hand-set queue weight 0.25 this cost replaced); 0 prices
	// the request's own TTFT alone. On the shipped trace 3 kept 92% of the
	// oracle's hit rate where 0 kept 88% (docs/benchmarks.md).
	DelayedRequests *float64 `json:"delayedRequests,omitempty" yaml:"delayedRequests,omitempty"`
	// PredictionTTL is how long a routed request's blocks count as cached
	// on its worker before the worker's own events confirm them, so a burst
	// of siblings lands together.
	PredictionTTLSeconds float64 `json:"predictionTTLSeconds" yaml:"predictionTTLSeconds"`
	// DefaultBlockSize is used for workers whose block size is not scraped
	// yet.
	DefaultBlockSize int `json:"defaultBlockSize" yaml:"defaultBlockSize"`
	// MaxPredictions bounds the predicted blocks kept.
	MaxPredictions int `json:"maxPredictions" yaml:"maxPredictions"`
}

func (c KVAwareConfig) withDefaults() KVAwareConfig {
	if c.TimingPreset == "" {
		c.TimingPreset = timing.DefaultPreset
	}
	if c.DelayedRequests == nil {
		three := 3.0
		c.DelayedRequests = &three
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
	return c
}

func (c KVAwareConfig) validate() error {
	if _, err := c.model(); err != nil {
		return errorf("kvAware.timingPreset: %v", err)
	}
	if !finiteNonNegative(*c.DelayedRequests) {
		return errorf("kvAware.delayedRequests must be a finite number >= 0, got %v", *c.DelayedRequests)
	}
	if !finiteNonNegative(c.PredictionTTLSeconds) || c.DefaultBlockSize < 1 || c.MaxPredictions < 0 {
		return errorf("kvAware.predictionTTLSeconds and maxPredictions must not be negative, defaultBlockSize must be >= 1")
	}
	return nil
}

// model is the cost model TimingPreset names.
func (c KVAwareConfig) model() (timing.Model, error) {
	p, err := timing.Lookup(c.TimingPreset)
	if err != nil {
		return timing.Model{}, err
	}
	return timing.NewModel(p)
}

// KVAware routes each request to the worker whose caches hold most of its
// prompt, priced by tier, plus a load term — through the shared load
// guard, so a popular prefix cannot pin all traffic to one worker. It
// reads the exact index the workers' KV events maintain; a request without
// token ids (the tokenizer failed) is routed by prefixaware instead.
type KVAware struct {
	cfg      KVAwareConfig
	model    timing.Model
	idx      BlockIndex
	guard    LoadGuard
	fallback *PrefixAware
	notes    PrefillObserver // passed the prefills it hears of; nil: none
	l2       L2View          // nil: the L2 is known from workers' events only
	now      func() time.Time

	mu    sync.Mutex
	preds map[uint64][]prediction // block key -> workers expected to hold it
}

// BlockIndex is the KV index kvaware reads: the in-memory kvindex.Index
// or a shared one (kvredis).
type BlockIndex interface {
	Lookup(keys []uint64, workers []string, out []kvindex.Match) []kvindex.Match
	Stats() kvindex.Stats
}

// L2View is the shared L2's own account of what it holds.
type L2View interface {
	// Leading returns how many leading tokens of a prompt for model the
	// L2 holds, in whole chunks; 0 when it holds none or is not known.
	Leading(model string, tokens []uint32) int
}

// L2Learner is an L2View that learns from prefills: an L2 that says
// nothing of what it holds (Redis), whose view takes every prefilled
// prompt's whole chunks as written through to it (l2learn).
type L2Learner interface {
	L2View
	Learn(keys []uint64)
}

type prediction struct {
	worker string
	until  time.Time
}

// NewKVAware returns kvaware over idx; fallback routes requests without
// token ids.
// cfg must be valid (Config.Validate); an unknown timing preset falls back
// to the default.
func NewKVAware(cfg KVAwareConfig, guard LoadGuardConfig, idx BlockIndex, fallback *PrefixAware) *KVAware {
	cfg = cfg.withDefaults()
	model, err := cfg.model()
	if err != nil {
		cfg.TimingPreset = timing.DefaultPreset
		model, _ = cfg.model()
	}
	return &KVAware{cfg: cfg, model: model, idx: idx, guard: NewLoadGuard(guard), fallback: fallback, now: time.Now, preds: map[uint64][]prediction{}}
}

// SetClock replaces the clock predictions expire by; the benchmark's
// discrete-event mode runs kvaware in virtual time. Call it before Pick.
func (k *KVAware) SetClock(now func() time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.now = now
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
		return k.fallback.Pick(req, eps)
	}
	seed := kvindex.Seed(req.Model, req.LoRA)
	// Workers of one fleet share a block size; keys are computed once per
	// distinct size.
	type sized struct {
		keys    []uint64
		workers []int
	}
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
			g = &sized{keys: kvindex.AppendKeys(nil, seed, req.TokenIDs, bs)}
			bySize[bs] = g
		}
		g.workers = append(g.workers, i)
	}
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
		k.mu.Lock()
		for j, i := range g.workers {
			m := ms[j]
			// Predictions count as GPU blocks the worker is computing now.
			if p := k.predicted(g.keys, names[i], now); p > m.GPU {
				m.GPU, m.Local, m.Any = p, max(m.Local, p), max(m.Any, p)
			}
			matches[i] = m
			blocks[i] = bs
		}
		k.mu.Unlock()
	}
	if k.l2 != nil {
		// The L2 serves every worker alike: a worker holding less of the
		// prompt locally fetches the rest from it instead of computing it.
		if l2 := k.l2.Leading(req.Model, req.TokenIDs); l2 > 0 {
			for i := range matches {
				if b := l2 / blocks[i]; b > matches[i].Any {
					matches[i].Any = b
				}
			}
		}
	}
	tokens := len(req.TokenIDs)
	own := make([]float64, len(eps))
	for i := range eps {
		m, bs := matches[i], blocks[i]
		gpu := min(m.GPU*bs, tokens)
		cpu := min((m.Local-m.GPU)*bs, tokens-gpu)
		l2 := min((m.Any-m.Local)*bs, tokens-gpu-cpu)
		cached := gpu + cpu + l2
		own[i] = k.model.PrefillComputeSeconds(cached, tokens-cached) +
			k.model.LoadSeconds(timing.TierCPU, cpu) + k.model.LoadSeconds(timing.TierRemote, l2)
	}
	// cost is the request's time to first token at worker i, in seconds
	// of the engine's cost model: the prefill queued ahead of it, then its
	// own prefill of what no tier holds and the loads of what L1 and L2
	// hold (GPU blocks cost nothing); its own part weighs more when later
	// requests are taken to wait behind it (DelayedRequests).
	cost := func(i int) float64 {
		return k.model.QueuedPrefillSeconds(eps[i].PendingPrefill) + own[i]*(1+*k.cfg.DelayedRequests)
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
	best := k.guard.Choose(eps, tie, func(i int) float64 { return -cost(i) })
	g := bySize[blocks[best]]
	if g == nil { // blocks[best] is 0 only when bySize was empty, which eps rules out
		g = &sized{}
	}
	k.predict(g.keys, eps[best].ID, now)
	m := matches[best]
	d := Decision{Endpoint: eps[best].ID, Strategy: NameKVAware, MatchedChunks: m.Any, TotalChunks: len(g.keys),
		TierBlocks: [3]int{m.GPU, m.Local - m.GPU, m.Any - m.Local}}
	if _, learns := k.l2.(L2Learner); k.notes != nil || learns {
		d.Keys = g.keys
	}
	if d.TotalChunks > 0 {
		d.MatchRatio = float64(d.MatchedChunks) / float64(d.TotalChunks)
	}
	d.PrefillTokens = max(len(req.TokenIDs)-matches[best].Any*blocks[best], 0)
	return d, nil
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
		l.Learn(keys)
	}
}

// predicted is the run of leading keys predicted on worker; k.mu held.
func (k *KVAware) predicted(keys []uint64, worker string, now time.Time) int {
	n := 0
	for _, key := range keys {
		found := false
		for _, p := range k.preds[key] {
			if p.worker == worker && now.Before(p.until) {
				found = true
				break
			}
		}
		if !found {
			break
		}
		n++
	}
	return n
}

// predict records that worker is computing keys.
func (k *KVAware) predict(keys []uint64, worker string, now time.Time) {
	ttl := time.Duration(k.cfg.PredictionTTLSeconds * float64(time.Second))
	if ttl <= 0 || len(keys) == 0 {
		return
	}
	until := now.Add(ttl)
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.preds)+len(keys) > k.cfg.MaxPredictions {
		for key := range k.preds {
			k.keepPredictions(key, func(p prediction) bool { return now.Before(p.until) })
		}
		if len(k.preds)+len(keys) > k.cfg.MaxPredictions {
			return // still full of live predictions: skip this one
		}
	}
	// The worker string is the pool's own (not the request's buffer).
	for _, key := range keys {
		ps := k.preds[key]
		replaced := false
		for i := range ps {
			if ps[i].worker == worker {
				ps[i].until, replaced = until, true
				break
			}
		}
		if !replaced {
			ps = append(ps, prediction{worker: worker, until: until})
		}
		k.preds[key] = ps
	}
}

// Confirm drops worker's predictions for keys its own events just
// reported stored: from then on the index is the truth, including any
// later eviction a lingering prediction would hide.
func (k *KVAware) Confirm(worker string, keys []uint64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, key := range keys {
		k.keepPredictions(key, func(p prediction) bool { return p.worker != worker })
	}
}

// Forget implements Forgetter.
func (k *KVAware) Forget(endpointID string) {
	k.fallback.Forget(endpointID)
	k.mu.Lock()
	defer k.mu.Unlock()
	for key := range k.preds {
		k.keepPredictions(key, func(p prediction) bool { return p.worker != endpointID })
	}
}

// keepPredictions keeps key's predictions that keep accepts, dropping the
// key when none is left; k.mu held. (Deleting the current key while
// ranging over the map is allowed.)
func (k *KVAware) keepPredictions(key uint64, keep func(prediction) bool) {
	ps, ok := k.preds[key]
	if !ok {
		return
	}
	live := ps[:0]
	for _, p := range ps {
		if keep(p) {
			live = append(live, p)
		}
	}
	if len(live) == 0 {
		delete(k.preds, key)
	} else {
		k.preds[key] = live
	}
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
