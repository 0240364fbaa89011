// Package des is warmpath-bench's discrete-event mode: a fleet of
// simulated vLLM+LMCache workers behind the router's strategy, in one
// process and in virtual time, so an hour of traffic over 8-64 workers
// replays in seconds. It runs the very code the real parts run — the
// simulator's engine model (tools/vllmsim/engine, lmcache) and the
// router's strategies and KV index (services/router/strategy, kvindex) —
// wired together by events instead of HTTP and ZMQ.
//
// Several routers can share the fleet (Config.Routers), as replicas behind
// one Service do: each request goes to one of them at random, and each
// has its own strategy, KV index and count of what it sent where; they
// share only what the workers publish (KV events, scraped load).
//
// What it leaves out: the network and the router's own latency (a request
// reaches its worker the instant it arrives; KV events reach the index at
// the end of the step that made them), tokenization (requests carry their
// token ids; chat prompts are their messages' contents, without the
// template), and the cache server's own work: the shared L2 is a chunk
// store every worker writes through to and fetches from at the cost
// libs/timing gives the remote tier (l2.go).
package des

import (
	"cmp"
	"container/heap"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/warmpath/warmpath/libs/blockhash"
	"github.com/warmpath/warmpath/libs/timing"
	"github.com/warmpath/warmpath/services/router/hrw"
	"github.com/warmpath/warmpath/services/router/kvindex"
	"github.com/warmpath/warmpath/services/router/peer"
	"github.com/warmpath/warmpath/services/router/strategy"
	"github.com/warmpath/warmpath/tools/bench/report"
	"github.com/warmpath/warmpath/tools/bench/workload"
	"github.com/warmpath/warmpath/tools/vllmsim/engine"
	"github.com/warmpath/warmpath/tools/vllmsim/kvpublish"
	"github.com/warmpath/warmpath/tools/vllmsim/lmcache"
)

// Config describes the fleet.
type Config struct {
	Workers int
	// Preset is the timing preset (timing.DefaultPreset when empty).
	Preset string
	// NumGPUBlocks per worker; 0 derives it from the preset at 0.9
	// memory utilisation.
	NumGPUBlocks        int
	BlockSize           int // 16 when zero
	MaxNumSeqs          int // 256 when zero
	MaxNumBatchedTokens int // 8192 when zero
	MaxModelLen         int // when zero, what the GPU blocks hold, at most 131072
	// L1Bytes is each worker's LMCache L1; 0 runs without LMCache.
	L1Bytes int64
	// L1Events is what each L1 publishes ("" is store-only, as current
	// LMCache); the router's view of the tier is kept accordingly, within
	// L1Bytes.
	L1Events lmcache.EventMode
	// L2Bytes is the shared L2 (warmpath's cache server, as LMCache's
	// remote backend) behind every worker's L1; 0 runs without it. The
	// router follows what it holds exactly, as l2view does.
	L2Bytes int64
	// Strategy is the router's strategy configuration.
	Strategy strategy.Config
	// Model names the model (it seeds the KV index's keys).
	Model string
	// Routers is how many router replicas split the requests, each taking
	// a request at random (1 when zero).
	Routers int
	// ScrapeSeconds is how often each router, when there are several,
	// reads the workers' load (vllm:num_requests_running and _waiting),
	// which is how it sees the other routers' requests (the router's
	// --scrape-interval: 1 s when zero). A lone router sees all it sent.
	ScrapeSeconds float64
	// Seed seeds the routers' split of the requests.
	Seed uint64
	// Forward, with several routers, sends each request on from the
	// replica it reached to the replica that owns its head (package
	// peer), as the router's --peers does; else the replica it reached
	// decides.
	Forward bool
	// PeerLoadSeconds, with Forward, is how often each replica reads the
	// others' in-flight counts per worker, as the router's
	// --peer-load-interval does (0.1 s when zero; negative: never, so
	// only the scrape shows the others' load).
	PeerLoadSeconds float64
}

// Record is one request as simulated.
type Record struct {
	Worker                        string
	Arrival, FirstToken, Finished float64 // seconds of virtual time
	// Scheduled is when the worker first scheduled the request: the time
	// after Arrival is its queueing delay.
	Scheduled                       float64
	PromptTokens, CachedTokens, Out int
	// Rejected is the worker's reason for refusing the request (a prompt
	// over the model length), as vLLM answers 400.
	Rejected string
}

// Result is a simulation's outcome.
type Result struct {
	Records []Record
	// Steps is the engine steps simulated over all workers.
	Steps int
}

// Run simulates reqs on the fleet.
func Run(cfg Config, reqs []workload.Request) (*Result, error) {
	s, err := newSim(cfg, reqs)
	if err != nil {
		return nil, err
	}
	return s.run()
}

type worker struct {
	id       string
	eng      *engine.Engine
	l1       *lmcache.L1
	stepping bool
	served   int
}

// replica is one router: its strategy and its own view of the fleet.
type replica struct {
	strategy strategy.Strategy
	feeds    []*kvindex.Worker // per worker: its events into this router's index
	byID     map[string]int    // worker ID -> index
	inFlight []int             // per worker: requests this router sent that have not finished
	pending  []int             // per worker: this router's PendingPrefill
	external []int             // per worker: the load others sent, as this router last learnt it
	// peers is, per worker, the other replicas' in-flight count as of the
	// last poll; unexplained is what the last scrape found beyond this
	// router's and the peers' requests then (always 0 here, where only
	// routers send; kept so the sum is the router's).
	peers, unexplained []int
}

// Prefilled implements strategy.PrefillObserver: the prefills of kvaware's
// prompts reach the worker's state in this router's index, as the
// router's subscriber passes them on.
func (r *replica) Prefilled(worker string, keys []uint64) {
	if j, ok := r.byID[worker]; ok {
		r.feeds[j].Prefilled(keys)
	}
}

type sim struct {
	cfg     Config
	l2      *lmcache.L1 // the shared L2's chunks; nil without one
	reqs    []workload.Request
	workers []*worker
	routers []*replica
	// routerIDs name the replicas, as peers know each other.
	routerIDs []string
	// routedBy is the router each request went through.
	routedBy []int
	split    *rand.Rand
	now      float64
	queue    events
	seq      int
	// periodic counts the scrape and peerPoll events queued: they come
	// again only while other events are queued, else each would keep the
	// other going forever.
	periodic int
	recs     []Record
	waiters  [][]int    // requests waiting for each request to finish
	prefill  []int      // each request's Decision.PrefillTokens, until its first token
	keys     [][]uint64 // each request's Decision.Keys, until its first token
	steps    int
}

// fleet builds workers alike: one preset's cost model, one hash seed.
type fleet struct {
	cfg    Config
	preset timing.Preset
	model  timing.Model
	hasher *blockhash.Hasher
}

func newFleet(cfg Config) (*fleet, error) {
	if cfg.Workers < 1 {
		return nil, errors.New("des: need at least one worker")
	}
	cfg.Preset = cmp.Or(cfg.Preset, timing.DefaultPreset)
	cfg.BlockSize = cmp.Or(cfg.BlockSize, 16)
	// The engine's own defaults, set here for the bound (bound.go).
	cfg.MaxNumSeqs = cmp.Or(cfg.MaxNumSeqs, 256)
	cfg.MaxNumBatchedTokens = cmp.Or(cfg.MaxNumBatchedTokens, 8192)
	cfg.Model = cmp.Or(cfg.Model, "model")
	preset, err := timing.Lookup(cfg.Preset)
	if err != nil {
		return nil, err
	}
	model, err := timing.NewModel(preset)
	if err != nil {
		return nil, err
	}
	// Every worker shares PYTHONHASHSEED, as a fleet sharing an L2 must.
	hasher, err := blockhash.New("0")
	if err != nil {
		return nil, err
	}
	if cfg.NumGPUBlocks == 0 {
		cfg.NumGPUBlocks = model.NumGPUBlocks(cfg.BlockSize, 0.9)
	}
	if cfg.MaxModelLen == 0 {
		cfg.MaxModelLen = min(cfg.NumGPUBlocks*cfg.BlockSize, 131072)
	}
	return &fleet{cfg: cfg, preset: preset, model: model, hasher: hasher}, nil
}

// worker returns a worker with scale times one worker's GPU blocks and L1
// (the oracle pools the whole fleet's) and one worker's model length,
// behind l2 when it is not nil.
func (f *fleet) worker(scale int, l2 *lmcache.L1) (*worker, error) {
	cfg := f.cfg
	w := &worker{}
	ec := engine.Config{BlockSize: cfg.BlockSize, NumGPUBlocks: scale * cfg.NumGPUBlocks, MaxNumSeqs: cfg.MaxNumSeqs,
		MaxNumBatchedTokens: cfg.MaxNumBatchedTokens, MaxModelLen: cfg.MaxModelLen,
		EnablePrefixCaching: true, Timing: f.model, Hasher: f.hasher}
	if cfg.L1Bytes > 0 || l2 != nil {
		var err error
		w.l1, err = lmcache.New(lmcache.Config{ChunkSize: l1ChunkTokens, MaxBytes: int64(scale) * cfg.L1Bytes,
			BytesPerToken: f.l1BytesPerToken(), Events: cfg.L1Events}, f.hasher)
		if err != nil {
			return nil, err
		}
		ec.Connector = w.l1
		if l2 != nil {
			ec.Connector = &tiered{l1: w.l1, l2: l2, hasher: f.hasher, model: f.model}
		}
	}
	var err error
	w.eng, err = engine.New(ec)
	return w, err
}

// l1ChunkTokens is LMCache's default chunk_size, which the fleet uses.
const l1ChunkTokens = 256

// l2Store is a shared L2 of the fleet's size; nil without one. It
// publishes nothing: the router reads it directly (l2View).
func (f *fleet) l2Store() (*lmcache.L1, error) {
	if f.cfg.L2Bytes <= 0 {
		return nil, nil
	}
	return lmcache.New(lmcache.Config{ChunkSize: l1ChunkTokens, MaxBytes: f.cfg.L2Bytes, BytesPerToken: f.l1BytesPerToken(),
		Events: lmcache.EventsNone}, f.hasher)
}

// l1BytesPerToken is one token's KV on one rank, what the L1 stores.
func (f *fleet) l1BytesPerToken() int64 {
	return int64(f.preset.KVBytesPerToken() / f.preset.TensorParallel)
}

// L1CapacityTokens is the tokens one worker's L1 holds, what the router's
// prefixaware is configured with for it (docs/router.md); 0 without L1.
func L1CapacityTokens(cfg Config) (int, error) {
	if cfg.L1Bytes <= 0 {
		return 0, nil
	}
	p, err := timing.Lookup(cmp.Or(cfg.Preset, timing.DefaultPreset))
	if err != nil {
		return 0, fmt.Errorf("des: %w", err)
	}
	return int(cfg.L1Bytes / int64(p.KVBytesPerToken()/p.TensorParallel)), nil
}

// cpuPolicy is how the router knows each worker's L1, from what the L1
// publishes and its size (as the operator configures the router).
func (f *fleet) cpuPolicy() (kvindex.TierPolicy, error) {
	mode, err := lmcache.ParseEventMode(string(f.cfg.L1Events))
	if err != nil {
		return kvindex.TierPolicy{}, err
	}
	src, err := kvindex.ParseEventSource(string(mode))
	if err != nil {
		return kvindex.TierPolicy{}, err
	}
	return kvindex.TierPolicy{Events: src, CapacityTokens: int(f.cfg.L1Bytes / f.l1BytesPerToken()), ChunkTokens: l1ChunkTokens}, nil
}

func newSim(cfg Config, reqs []workload.Request) (*sim, error) {
	f, err := newFleet(cfg)
	if err != nil {
		return nil, err
	}
	cfg = f.cfg
	s := &sim{cfg: cfg, reqs: reqs, recs: make([]Record, len(reqs)), waiters: make([][]int, len(reqs)), prefill: make([]int, len(reqs)),
		keys: make([][]uint64, len(reqs)), routedBy: make([]int, len(reqs)), split: rand.New(rand.NewPCG(cfg.Seed, 0x5e1ec7))}
	if s.l2, err = f.l2Store(); err != nil {
		return nil, fmt.Errorf("des: L2: %w", err)
	}
	for i := range cfg.Workers {
		w, err := f.worker(1, s.l2)
		if err != nil {
			return nil, fmt.Errorf("des: worker %d: %w", i, err)
		}
		w.id = "http://worker-" + strconv.Itoa(i)
		s.workers = append(s.workers, w)
	}
	// kvaware prices the tiers with the cost model the fleet runs on.
	cfg.Strategy.KVAware.Timing = cmp.Or(cfg.Strategy.KVAware.Timing, cfg.Preset)
	for range max(cfg.Routers, 1) {
		r, err := s.newReplica(f)
		if err != nil {
			return nil, err
		}
		s.routers = append(s.routers, r)
		s.routerIDs = append(s.routerIDs, "http://router-"+strconv.Itoa(len(s.routerIDs)))
	}
	if len(s.routers) > 1 {
		s.push(event{at: 0, kind: scrape})
		if s.peerLoadSeconds() > 0 {
			s.push(event{at: 0, kind: peerPoll})
		}
	}
	for i, r := range reqs {
		switch {
		case r.After < 0:
			s.push(event{at: r.Arrival.Seconds(), kind: arrive, req: i})
		case r.After >= len(reqs) || r.After == i:
			return nil, fmt.Errorf("des: request %d waits for %d, which does not exist", i, r.After)
		default:
			s.waiters[r.After] = append(s.waiters[r.After], i)
		}
	}
	return s, nil
}

// newReplica builds a router with its own index, fed by every worker.
func (s *sim) newReplica(f *fleet) (*replica, error) {
	n := len(s.workers)
	r := &replica{inFlight: make([]int, n), pending: make([]int, n), external: make([]int, n),
		peers: make([]int, n), unexplained: make([]int, n), byID: map[string]int{}}
	idx := kvindex.New(1 << 24)
	preds := strategy.NewPredictions()
	sink := strategy.ConfirmingSink{Sink: idx, Confirmer: preds}
	cpu, err := f.cpuPolicy()
	if err != nil {
		return nil, fmt.Errorf("des: %w", err)
	}
	for j, w := range s.workers {
		r.byID[w.id] = j
		feed := kvindex.NewWorker(sink, w.id, s.cfg.Model, nil)
		if s.cfg.L1Bytes > 0 {
			feed.SetTier(kvindex.CPU, cpu)
		}
		r.feeds = append(r.feeds, feed)
	}
	opts := []strategy.Option{strategy.WithIndex(idx), strategy.WithPrefillNotes(r), strategy.WithPredictions(preds)}
	if s.l2 != nil {
		opts = append(opts, strategy.WithL2(l2View{store: s.l2}))
	}
	r.strategy, err = strategy.New(s.cfg.Strategy, opts...)
	if err != nil {
		return nil, err
	}
	if rs, ok := r.strategy.(replicaSharer); ok && s.cfg.Forward && s.cfg.Routers > 1 {
		// Relaying, a replica sees every request of its own families but
		// only 1/Routers of what fills each worker's cache, so it models a
		// 1/Routers share. Routing alone, it sees a random 1/Routers of
		// all requests: the reuses of a prefix and the traffic that would
		// evict it are thinned alike, so the whole capacity already
		// matches how long the worker keeps it, and a share would forget
		// prefixes the worker still holds.
		rs.SetReplicas(s.cfg.Routers)
	}
	if k, ok := r.strategy.(*strategy.KVAware); ok {
		// Predictions expire in virtual time.
		k.SetClock(func() time.Time { return time.Unix(0, 0).Add(time.Duration(s.now * float64(time.Second))) })
	}
	return r, nil
}

// replicaSharer is a strategy whose model of the workers' caches is scaled
// to its replica's share of the prompt families (strategy.PrefixAware and
// those that fall back to it).
type replicaSharer interface{ SetReplicas(n int) }

type eventKind int

const (
	arrive eventKind = iota
	step
	scrape   // the routers read the workers' load
	peerPoll // the routers read each other's in-flight counts
)

type event struct {
	at     float64
	seq    int
	kind   eventKind
	req    int
	worker int
}

type events []event

func (e events) Len() int { return len(e) }
func (e events) Less(i, j int) bool {
	if e[i].at != e[j].at {
		return e[i].at < e[j].at
	}
	return e[i].seq < e[j].seq
}
func (e events) Swap(i, j int) { e[i], e[j] = e[j], e[i] }
func (e *events) Push(x any)   { *e = append(*e, x.(event)) }
func (e *events) Pop() any {
	old := *e
	x := old[len(old)-1]
	*e = old[:len(old)-1]
	return x
}

func (s *sim) push(ev event) {
	ev.seq = s.seq
	s.seq++
	if ev.kind == scrape || ev.kind == peerPoll {
		s.periodic++
	}
	heap.Push(&s.queue, ev)
}

func (s *sim) run() (*Result, error) {
	for s.queue.Len() > 0 {
		ev := heap.Pop(&s.queue).(event)
		if ev.kind == scrape || ev.kind == peerPoll {
			s.periodic--
		}
		s.now = ev.at
		switch ev.kind {
		case arrive:
			if err := s.arrive(ev.req); err != nil {
				return nil, err
			}
		case step:
			s.step(ev.worker)
		case scrape:
			s.scrape()
		case peerPoll:
			s.peerPoll()
		}
	}
	for i, r := range s.recs {
		if r.Worker == "" {
			return nil, fmt.Errorf("des: request %d never ran", i)
		}
	}
	return &Result{Records: s.recs, Steps: s.steps}, nil
}

// scrape gives each router the load at each worker that neither it nor
// its peers (as of their last report) account for, and comes again while
// anything else is to happen. Without peer polling that is all the others
// sent, known only this often, as the router's pool.Endpoint.External.
func (s *sim) scrape() {
	for _, r := range s.routers {
		for j, w := range s.workers {
			r.unexplained[j] = max(0, w.eng.NumRunning()+w.eng.NumWaiting()-r.inFlight[j]-r.peers[j])
			r.external[j] = r.peers[j] + r.unexplained[j]
		}
	}
	if s.queue.Len() > s.periodic {
		s.push(event{at: s.now + cmp.Or(s.cfg.ScrapeSeconds, 1), kind: scrape})
	}
}

// peerLoadSeconds is the peer poll interval; <= 0 for none.
func (s *sim) peerLoadSeconds() float64 {
	if !s.cfg.Forward || s.cfg.PeerLoadSeconds < 0 {
		return 0
	}
	return cmp.Or(s.cfg.PeerLoadSeconds, 0.1)
}

// peerPoll gives each router the others' in-flight counts per worker, as
// package peerload's poller does (without its network delay), and comes
// again while anything else is to happen.
func (s *sim) peerPoll() {
	for i, r := range s.routers {
		for j := range s.workers {
			r.peers[j] = 0
			for k, o := range s.routers {
				if k != i {
					r.peers[j] += o.inFlight[j]
				}
			}
			r.external[j] = r.peers[j] + r.unexplained[j]
		}
	}
	if s.queue.Len() > s.periodic {
		s.push(event{at: s.now + s.peerLoadSeconds(), kind: peerPoll})
	}
}

func (s *sim) arrive(i int) error {
	r := &s.reqs[i]
	tokens := r.Tokens()
	req := &strategy.Request{Model: s.cfg.Model, Prompt: render(tokens), SessionKey: r.Session, TokenIDs: tokens}
	ri := 0
	if len(s.routers) > 1 {
		ri = s.split.IntN(len(s.routers))
		// Round robin is not relayed (the router's relayToOwner).
		if s.cfg.Forward && s.cfg.Strategy.Name != strategy.NameRoundRobin {
			ri = hrw.Owner(peer.RequestKey(req), s.routerIDs)
		}
	}
	s.routedBy[i] = ri
	rt := s.routers[ri]
	eps := make([]strategy.Endpoint, len(s.workers))
	for j, w := range s.workers {
		cfg := w.eng.Config()
		eps[j] = strategy.Endpoint{ID: w.id, InFlight: rt.inFlight[j], External: rt.external[j], Running: w.eng.NumRunning(), Waiting: w.eng.NumWaiting(),
			KVCacheUsage: w.eng.KVCacheUsage(), BlockSize: cfg.BlockSize, NumGPUBlocks: cfg.NumGPUBlocks, PendingPrefill: rt.pending[j]}
	}
	d, err := rt.strategy.Pick(req, eps)
	if err != nil {
		return fmt.Errorf("des: request %d: %w", i, err)
	}
	wi := -1
	for j, w := range s.workers {
		if w.id == d.Endpoint {
			wi = j
		}
	}
	if wi < 0 {
		return fmt.Errorf("des: request %d routed to unknown worker %q", i, d.Endpoint)
	}
	w := s.workers[wi]
	err = w.eng.Add(&engine.Request{ID: strconv.Itoa(i), Prompt: tokens, MaxTokens: r.MaxTokens, Arrival: s.now})
	if err != nil {
		// Refused, as vLLM answers 400; the run goes on.
		s.recs[i] = Record{Worker: w.id, Arrival: s.now, Finished: s.now, PromptTokens: len(tokens), Rejected: err.Error()}
		s.release(i)
		return nil //nolint:nilerr // a refused request is a result, not a failure of the simulation
	}
	rt.inFlight[wi]++
	s.prefill[i], s.keys[i] = d.PrefillTokens, d.Keys
	rt.pending[wi] += d.PrefillTokens
	s.recs[i] = Record{Worker: w.id, Arrival: s.now, PromptTokens: len(tokens)}
	if !w.stepping {
		w.stepping = true
		s.push(event{at: s.now, kind: step, worker: wi})
	}
	return nil
}

// release sends the requests that waited for request i to finish.
func (s *sim) release(i int) {
	for _, c := range s.waiters[i] {
		s.push(event{at: math.Max(s.recs[i].Finished, s.now) + s.reqs[c].Think.Seconds(), kind: arrive, req: c})
	}
}

// render is the text prefixaware hashes: four bytes per token id, so its
// bytes-per-token estimate (4) holds and shared token prefixes are shared
// text prefixes.
func render(tokens []uint32) string {
	b := make([]byte, 4*len(tokens))
	for i, t := range tokens {
		binary.LittleEndian.PutUint32(b[4*i:], t)
	}
	return string(b)
}

func (s *sim) step(wi int) {
	w := s.workers[wi]
	res := w.eng.Step(s.now)
	// Prefills that ended in this step reach kvaware before the step's
	// events, as LMCache touches a prompt's resident chunks before storing
	// its new ones.
	for _, o := range res.Outputs {
		i, _ := strconv.Atoi(o.Request.ID)
		if po, ok := s.routers[s.routedBy[i]].strategy.(strategy.PrefillObserver); ok && o.First && s.keys[i] != nil {
			po.Prefilled(w.id, s.keys[i])
			s.keys[i] = nil
		}
	}
	evs := res.Events
	if w.l1 != nil {
		evs = append(evs, w.l1.TakeEvents()...)
	}
	if len(evs) > 0 {
		// Every router subscribes to every worker.
		for _, r := range s.routers {
			r.feeds[wi].Apply(kvpublish.Batch(evs, true))
		}
	}
	s.steps++
	end := s.now + res.Duration
	for _, o := range res.Outputs {
		i, _ := strconv.Atoi(o.Request.ID)
		rec := &s.recs[i]
		st := o.Request.Stats
		rt := s.routers[s.routedBy[i]]
		if o.First {
			rt.pending[wi] -= s.prefill[i]
			rec.FirstToken = st.FirstToken
			rec.Scheduled = st.FirstScheduled
			rec.CachedTokens = st.CachedTokens + st.ExternalTokens
		}
		if o.Finished {
			rec.Finished = st.Finished
			rec.Out = st.OutputTokens
			rt.inFlight[wi]--
			w.served++
			s.release(i)
		}
	}
	if res.Duration == 0 && !w.eng.HasWork() {
		w.stepping = false
		return
	}
	s.push(event{at: end, kind: step, worker: wi})
}

// Report turns a result into the report's run, with the oracle: the hit
// rate of one worker holding the whole fleet's cache.
func Report(name, workloadName string, cfg Config, reqs []workload.Request, res *Result) report.Run {
	r := report.Run{Name: name, Workload: workloadName, HitRate: math.NaN(), MetricsHitRate: math.NaN(), PerWorker: map[string]float64{}}
	var first, last float64 = math.Inf(1), 0
	for _, rec := range res.Records {
		if rec.Rejected != "" {
			r.Samples = append(r.Samples, report.Sample{Failed: true})
			continue
		}
		r.Samples = append(r.Samples, report.Sample{
			TTFT:         seconds(rec.FirstToken - rec.Arrival),
			E2E:          seconds(rec.Finished - rec.Arrival),
			PromptTokens: int64(rec.PromptTokens), CachedTokens: int64(rec.CachedTokens), OutputTokens: int64(rec.Out),
		})
		if rec.Out > 1 {
			r.Samples[len(r.Samples)-1].MeanITL = seconds((rec.Finished - rec.FirstToken) / float64(rec.Out-1))
		}
		r.PerWorker[rec.Worker]++
		first, last = math.Min(first, rec.Arrival), math.Max(last, rec.Finished)
	}
	r.Makespan = seconds(last - first)
	return r
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// OracleResult is what one worker holding the whole fleet's cache
// reaches: the bound routing works against.
type OracleResult struct {
	// HitRate is its prefix hit rate (GPU and L1 hits over prompt tokens).
	HitRate float64
	// TTFTP90 is its time to first token with each request served alone:
	// the oracle's hits and no queue. No router's p90 can beat it, bar
	// queueing luck.
	TTFTP90 time.Duration
}

// Oracle runs the requests, in the order they arrived in res, one at a
// time through a single simulated worker whose GPU holds every worker's
// blocks and whose LMCache L1 every worker's bytes (behind an L2 of the
// fleet's size, when it has one): the same engine and
// L1 as the fleet's workers, so the bound keeps their semantics (L1 is
// written through from the GPU, so the two tiers overlap; adding their
// sizes would overstate it). Requests the fleet refused are left out.
// Each request generates one token only: the hit rate concerns prompts,
// and decoding would only add its output's blocks to the cache.
func Oracle(cfg Config, reqs []workload.Request, res *Result) (OracleResult, error) {
	served, err := oracle(cfg, reqs, res)
	if err != nil {
		return OracleResult{}, err
	}
	return summarise(served), nil
}

// oracleServed is one request as the oracle served it, alone.
type oracleServed struct {
	req          int
	prompt, hits int // prompt tokens, and those found cached (GPU, L1 or L2)
	ttft         time.Duration
}

func summarise(served []oracleServed) OracleResult {
	var hits, total int
	ttfts := make([]time.Duration, 0, len(served))
	for _, s := range served {
		hits += s.hits
		total += s.prompt
		ttfts = append(ttfts, s.ttft)
	}
	if total == 0 {
		return OracleResult{}
	}
	slices.Sort(ttfts)
	return OracleResult{HitRate: float64(hits) / float64(total), TTFTP90: report.Percentile(ttfts, 90)}
}

// oracle serves the requests as Oracle describes, in arrival order.
func oracle(cfg Config, reqs []workload.Request, res *Result) ([]oracleServed, error) {
	cfg.Workers = max(cfg.Workers, 1)
	f, err := newFleet(cfg)
	if err != nil {
		return nil, err
	}
	// The L2 is shared already: the oracle has one of the same size.
	l2, err := f.l2Store()
	if err != nil {
		return nil, fmt.Errorf("des: oracle: L2: %w", err)
	}
	w, err := f.worker(cfg.Workers, l2)
	if err != nil {
		return nil, err
	}
	order := make([]int, 0, len(reqs))
	for i := range reqs {
		if res.Records[i].Rejected == "" {
			order = append(order, i)
		}
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(res.Records[a].Arrival, res.Records[b].Arrival) })
	served := make([]oracleServed, 0, len(order))
	now := 0.0
	for _, i := range order {
		r := &engine.Request{ID: strconv.Itoa(i), Prompt: reqs[i].Tokens(), MaxTokens: 1}
		if err := w.eng.Add(r); err != nil {
			return nil, fmt.Errorf("des: oracle: request %d: %w", i, err)
		}
		start := now
		for w.eng.HasWork() {
			st := w.eng.Step(now)
			now += st.Duration
			if w.l1 != nil {
				w.l1.TakeEvents() // nobody indexes the oracle's events
			}
		}
		served = append(served, oracleServed{req: i, prompt: r.Stats.PromptTokens,
			hits: r.Stats.CachedTokens + r.Stats.ExternalTokens, ttft: seconds(r.Stats.FirstToken - start)})
	}
	return served, nil
}
