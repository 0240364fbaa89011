// Package l2view is the router's exact account of what warmpath's cache
// servers (the shared L2) hold, learnt from their own KV-event streams
// (docs/cacheserver.md, "KV events"): a snapshot over HTTP, then the
// stream's BlockStored/BlockRemoved. It answers kvaware's question "how many
// leading tokens of this prompt could a worker fetch from the L2?"
// (strategy.L2View).
//
// In cluster mode every node publishes the copies it owns, so the view is
// the union over its endpoints: each chunk records which endpoints hold it,
// and one node's removal leaves another node's copy counted.
package l2view

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/warmpath/warmpath/libs/blockhash"
	"github.com/warmpath/warmpath/libs/zmtpguard"
)

// MaxEndpoints is the most cache servers one view follows: a chunk's
// holders are a bit set in one uint64.
const MaxEndpoints = 64

// Endpoint is one cache server: its event stream and its data API.
type Endpoint struct {
	// Events is its PUB socket, tcp://host:port (--kv-events-endpoint).
	Events string
	// SnapshotURL is the base URL of its data API (http://host:8080); the
	// snapshot is GET <SnapshotURL>/v1/kv-events/snapshot?model=<m>.
	SnapshotURL string
}

// Config configures a View. Zero durations and sizes take the defaults.
type Config struct {
	Endpoints []Endpoint
	// TokenFile holds the cache servers' bearer token, reread at every
	// snapshot so a rotated token is picked up; empty: no token.
	TokenFile string
	// ChunkTokens is LMCache's chunk_size (256).
	ChunkTokens int
	// HashSeed is the workers' PYTHONHASHSEED: LMCache's chunk hashes
	// chain from a root derived from it. Required: without it no two
	// processes agree on a hash.
	HashSeed string
	// MaxChunks bounds the chunks held over all models and endpoints
	// (4 Mi, about 40 bytes each). A chunk no endpoint held yet is not
	// taken beyond it (see View.add for why).
	MaxChunks int
	// MaxModels bounds the models followed (64): a model only becomes
	// known from a cache server's topic or a routed request.
	MaxModels int
	// SnapshotTimeout bounds one snapshot request (10s); SnapshotMaxBytes
	// its body (96 MiB: a cache server answers at most 1 Mi chunks,
	// ~67 bytes each).
	SnapshotTimeout  time.Duration
	SnapshotMaxBytes int64
	// RetryInterval is the first wait before dialing a cache server again
	// (1s, doubling to 30s).
	RetryInterval time.Duration
	// DropAfter is how long a cache server may stay disconnected before
	// its chunks stop counting (10s): the router must not credit an L2
	// node that is gone, but a blip should not cost a full resync.
	DropAfter time.Duration
	// Limits bound what a publisher may make the SUB socket allocate.
	Limits zmtpguard.Limits
	// Client does the snapshot requests; nil: a fresh http.Client.
	Client *http.Client
}

func (c Config) withDefaults() Config {
	if c.ChunkTokens <= 0 {
		c.ChunkTokens = 256
	}
	if c.MaxChunks <= 0 {
		c.MaxChunks = 4 << 20
	}
	if c.MaxModels <= 0 {
		c.MaxModels = 64
	}
	if c.SnapshotTimeout <= 0 {
		c.SnapshotTimeout = 10 * time.Second
	}
	if c.SnapshotMaxBytes <= 0 {
		c.SnapshotMaxBytes = 96 << 20
	}
	if c.RetryInterval <= 0 {
		c.RetryInterval = time.Second
	}
	if c.DropAfter <= 0 {
		c.DropAfter = 10 * time.Second
	}
	if c.Client == nil {
		c.Client = &http.Client{}
	}
	return c
}

// View is the union of the cache servers' holdings. Leading is safe for
// concurrent use; Run feeds it.
type View struct {
	cfg    Config
	hasher *blockhash.Hasher
	log    *slog.Logger

	// Membership, under mu: the cache servers followed (eps), the holder
	// bits they and the ones still stopping use, and, once Run started,
	// what starts a new one's goroutine.
	eps     []*endpoint
	used    uint64
	runCtx  context.Context //nolint:containedctx // Run's, for servers Update adds
	scheme  string
	running sync.WaitGroup

	mu sync.RWMutex
	// models maps a model to its chunks (a key: see keyOf) and, per
	// chunk, the bit set of endpoints holding it.
	models  map[string]map[uint64]uint64
	total   int // chunks over all models
	refused uint64
	// wanted are the models routed requests asked about: every endpoint
	// fetches their snapshot even when its stream never names them (a
	// cache server that held them before the router started).
	wanted map[string]struct{}
}

// New validates cfg and returns a view; Run starts following.
func New(cfg Config, log *slog.Logger) (*View, error) {
	cfg = cfg.withDefaults()
	if len(cfg.Endpoints) > MaxEndpoints {
		return nil, fmt.Errorf("l2view: %d endpoints, at most %d", len(cfg.Endpoints), MaxEndpoints)
	}
	if cfg.HashSeed == "" {
		return nil, errors.New("l2view: the workers' hash seed (PYTHONHASHSEED) is required: LMCache's chunk hashes depend on it")
	}
	for i, e := range cfg.Endpoints {
		if e.Events == "" || e.SnapshotURL == "" {
			return nil, fmt.Errorf("l2view: endpoint %d: both the event endpoint and the snapshot URL are required", i)
		}
	}
	h, err := blockhash.New(cfg.HashSeed)
	if err != nil {
		return nil, fmt.Errorf("l2view: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	v := &View{cfg: cfg, hasher: h, log: log, models: map[string]map[uint64]uint64{}, wanted: map[string]struct{}{}}
	v.Update(cfg.Endpoints)
	return v, nil
}

// Update makes the view follow exactly eps, a discovery source's current
// set of cache servers: new ones are dialed, and gone ones are stopped and
// their chunks stop counting at once (a node that left must not be
// credited). Beyond MaxEndpoints at once, the rest wait for a later
// update (logged). Safe for concurrent use with Run and Leading.
func (v *View) Update(eps []Endpoint) {
	v.mu.Lock()
	defer v.mu.Unlock()
	want := make(map[Endpoint]bool, len(eps))
	for _, e := range eps {
		want[e] = true
	}
	kept := v.eps[:0:0]
	for _, e := range v.eps {
		if want[e.cfg] {
			kept = append(kept, e)
			delete(want, e.cfg)
			continue
		}
		v.retire(e)
	}
	v.eps = kept
	for _, cfg := range eps {
		if !want[cfg] {
			continue
		}
		delete(want, cfg)
		i := bits.TrailingZeros64(^v.used)
		if i >= MaxEndpoints {
			v.log.Warn("l2 view: too many cache servers; this one is not followed until others leave", "events", cfg.Events, "max", MaxEndpoints)
			continue
		}
		e := newEndpoint(v, i, cfg)
		v.used |= e.bit
		v.eps = append(v.eps, e)
		v.log.Info("l2 view: following a cache server", "events", cfg.Events, "snapshot", cfg.SnapshotURL)
		v.start(e)
	}
}

// start runs e's goroutine once Run has started. v.mu held.
func (v *View) start(e *endpoint) {
	if v.runCtx == nil || v.runCtx.Err() != nil {
		return
	}
	ctx, cancel := context.WithCancel(v.runCtx)
	e.stop, e.done = cancel, make(chan struct{})
	v.running.Go(func() {
		defer close(e.done)
		e.run(ctx, v.scheme)
	})
}

// retire stops e, then takes its chunks out of the view and frees its
// holder bit once its goroutine has ended (it may be applying a batch
// until then). v.mu held.
func (v *View) retire(e *endpoint) {
	v.log.Info("l2 view: cache server gone; its chunks no longer count", "events", e.cfg.Events, "chunks", e.chunks)
	forget := func() {
		v.clear(e, "")
		v.used &^= e.bit
	}
	if e.stop == nil {
		forget()
		return
	}
	e.stop()
	go func() {
		<-e.done
		v.mu.Lock()
		defer v.mu.Unlock()
		forget()
	}()
}

// keyOf is the 8 bytes of a chunk hash the view keeps: the last 8 of its
// 32-byte form, which is also what kvevents.BlockHash.Uint64 gives for a
// bytes hash and the value of an integer one, so a publisher that sends
// either form of one chunk maps to one key. Two chunks of one model
// agreeing on 64 bits of sha256 are not a practical concern.
func keyOf(h blockhash.Hash) uint64 {
	var k uint64
	for _, b := range h[blockhash.Size-8:] {
		k = k<<8 | uint64(b)
	}
	return k
}

// ChunkTokens is the L2's chunk size in tokens (LMCache's chunk_size).
func (v *View) ChunkTokens() int { return v.cfg.ChunkTokens }

// Leading implements strategy.L2View: the leading tokens of a prompt for
// model that the L2 holds, in whole chunks. It hashes one chunk at a time
// and stops at the first chunk not held, so a miss costs one sha256. A
// request for a LoRA adapter is credited nothing: LMCache's L2 keys name
// the model, not the adapter, so a chunk held for the base model (or
// another adapter) cannot be told from the request's own, and the view
// under-credits rather than over-credits.
func (v *View) Leading(model, lora string, tokens []uint32) int {
	v.want(model)
	if lora != "" {
		return 0
	}
	v.mu.RLock()
	empty := len(v.models[model]) == 0
	v.mu.RUnlock()
	if empty {
		return 0 // no L2 chunk of the model known: not even one sha256
	}
	cs := v.cfg.ChunkTokens
	parent := v.hasher.None()
	n := 0
	for end := cs; end <= len(tokens); end += cs {
		h := v.hasher.Block(parent, tokens[end-cs:end], nil)
		v.mu.RLock()
		_, ok := v.models[model][keyOf(h)]
		v.mu.RUnlock()
		if !ok {
			break
		}
		parent, n = h, end
	}
	return n
}

// want records that requests ask about model, and wakes the endpoints so
// they fetch its snapshot.
func (v *View) want(model string) {
	v.mu.RLock()
	_, ok := v.wanted[model]
	full := len(v.wanted) >= v.cfg.MaxModels
	v.mu.RUnlock()
	if ok || full {
		return
	}
	v.mu.Lock()
	if len(v.wanted) < v.cfg.MaxModels {
		v.wanted[model] = struct{}{}
	}
	for _, e := range v.eps {
		select {
		case e.kick <- struct{}{}:
		default:
		}
	}
	v.mu.Unlock()
}

// wantedModels returns the models requests asked about.
func (v *View) wantedModels() []string {
	v.mu.RLock()
	defer v.mu.RUnlock()
	out := make([]string, 0, len(v.wanted))
	for m := range v.wanted {
		out = append(out, m)
	}
	return out
}

// add records that endpoint e holds key of model. A chunk no endpoint
// held yet is refused (and counted) when the view is full: refusing
// needs no recency order, so a chunk costs only its key and holder set,
// and a missing chunk only makes the router credit the L2 with less than
// it holds, never with more. Space comes back as the servers publish
// removals. v.mu held.
func (v *View) add(e *endpoint, model string, key uint64) {
	m := v.models[model]
	if m == nil {
		m = map[uint64]uint64{}
		v.models[model] = m
	}
	holders, ok := m[key]
	if holders&e.bit != 0 {
		return
	}
	if !ok {
		if v.total >= v.cfg.MaxChunks {
			v.refused++
			return
		}
		v.total++
	}
	m[key] = holders | e.bit
	e.chunks++
}

// remove records that endpoint e no longer holds key of model. v.mu held.
func (v *View) remove(e *endpoint, model string, key uint64) {
	m := v.models[model]
	holders, ok := m[key]
	if !ok || holders&e.bit == 0 {
		return
	}
	e.chunks--
	if holders &^= e.bit; holders == 0 {
		delete(m, key)
		v.total--
		return
	}
	m[key] = holders
}

// clear drops endpoint e's part of model, or of every model when model is
// "". v.mu held.
func (v *View) clear(e *endpoint, model string) {
	for name, m := range v.models {
		if model != "" && name != model {
			continue
		}
		for k, holders := range m {
			if holders&e.bit == 0 {
				continue
			}
			e.chunks--
			if holders &^= e.bit; holders == 0 {
				delete(m, k)
				v.total--
			} else {
				m[k] = holders
			}
		}
	}
}

// replace makes keys endpoint e's whole part of model. v.mu held.
func (v *View) replace(e *endpoint, model string, keys []uint64) {
	v.clear(e, model)
	for _, k := range keys {
		v.add(e, model, k)
	}
}

// holders counts the endpoints holding key of model (tests).
func (v *View) holders(model string, key uint64) int {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return bits.OnesCount64(v.models[model][key])
}

// Stats are the whole view's counts.
type Stats struct {
	Chunks    int    `json:"chunks"`
	MaxChunks int    `json:"maxChunks"`
	Refused   uint64 `json:"refusedChunks"`
}

// Stats returns the whole view's counts.
func (v *View) Stats() Stats {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return Stats{Chunks: v.total, MaxChunks: v.cfg.MaxChunks, Refused: v.refused}
}

// ParseEndpoints pairs the comma-separated event endpoints with the
// snapshot base URLs, in the same order (the router's --l2-events-endpoints
// and --l2-snapshot-urls). An explicit list rather than a template: a
// cache server's data API port is its own flag, not derived from the
// event port.
func ParseEndpoints(events, snapshots string) ([]Endpoint, error) {
	split := func(s string) []string {
		var out []string
		for p := range strings.SplitSeq(s, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
		return out
	}
	ev, sn := split(events), split(snapshots)
	if len(ev) != len(sn) {
		return nil, fmt.Errorf("l2view: %d event endpoints but %d snapshot URLs; give one of each per cache server, in the same order", len(ev), len(sn))
	}
	out := make([]Endpoint, len(ev))
	for i := range ev {
		if !strings.HasPrefix(ev[i], "tcp://") {
			return nil, fmt.Errorf("l2view: event endpoint %q: want tcp://host:port", ev[i])
		}
		u, err := url.Parse(sn[i])
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("l2view: snapshot URL %q: want http(s)://host:port", sn[i])
		}
		out[i] = Endpoint{Events: ev[i], SnapshotURL: sn[i]}
	}
	return out, nil
}
