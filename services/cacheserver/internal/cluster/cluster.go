// Package cluster spreads the cache server's keys over its peers:
// rendezvous (highest-random-weight) hashing names each key's owner(s), a
// node forwards requests for keys it does not own to the owner over lm://
// (one hop, pooled connections), so a worker talking to its node-local
// server reads KV written through any node. A membership change moves only
// the keys whose owner changed; a peer that fails costs a miss, never an
// error, and a peer that keeps failing is skipped for a backoff (see
// Config.FailuresToEject) so a dead or hung peer costs a fast miss rather
// than a timeout per request.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmpath/warmpath/libs/lmproto"
	"github.com/warmpath/warmpath/services/cacheserver/internal/store"
)

// Config tunes a Cluster.
type Config struct {
	// Self is this node's peer address (its --peer-listen, as its peers
	// know it): peers forward to each other's peer listeners, which serve
	// the local store only, so a request makes at most one hop.
	Self string
	// Replicas is how many nodes hold each key (1 or 2).
	Replicas int
	// ConnsPerPeer bounds the pooled lm:// connections to one peer (8).
	ConnsPerPeer int
	// Timeout bounds one forwarded request (500ms): it is what a hung peer
	// costs a request before the peer is ejected.
	Timeout time.Duration
	// FailuresToEject is how many consecutive failed forwards mark a peer
	// down (3). A down peer is skipped (its keys are misses) for a backoff
	// that starts at Backoff (1s) and doubles, up to MaxBackoff (30s), each
	// time the one probe let through after it fails; a forward that
	// succeeds brings the peer back.
	FailuresToEject     int
	Backoff, MaxBackoff time.Duration
	// Now is the clock backoffs are measured on (time.Now when nil).
	Now func() time.Time
	// MaxValueBytes bounds a forwarded GET's value.
	MaxValueBytes int
}

// LocalStore is the node's own store, as the cluster reads and writes its
// share of the keys: store.Memory or store.Tiered. Its four methods are the
// four operations lm:// serves and forwards.
type LocalStore interface {
	Get(key string) (*store.Object, bool)
	Put(key string, obj *store.Object) bool
	Contains(key string) bool
	Delete(key string) bool
}

// Cluster is the node's view of the key space. With no peers it is the
// local store alone.
type Cluster struct {
	cfg       Config
	local     LocalStore
	forwarded *prometheus.CounterVec // op, result

	mu    sync.RWMutex
	peers []string // lm:// addresses, Self included, sorted
	pools map[string]*pool
}

// New returns a cluster over the local store; forwarded counts forwarded
// requests by op and result (ok, hit, miss, error).
func New(cfg Config, local LocalStore, forwarded *prometheus.CounterVec) *Cluster {
	if cfg.Replicas < 1 {
		cfg.Replicas = 1
	}
	if cfg.ConnsPerPeer <= 0 {
		cfg.ConnsPerPeer = 8
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 500 * time.Millisecond
	}
	if cfg.FailuresToEject <= 0 {
		cfg.FailuresToEject = 3
	}
	if cfg.Backoff <= 0 {
		cfg.Backoff = time.Second
	}
	if cfg.MaxBackoff < cfg.Backoff {
		cfg.MaxBackoff = max(30*time.Second, cfg.Backoff)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Cluster{cfg: cfg, local: local, forwarded: forwarded, peers: []string{cfg.Self}, pools: map[string]*pool{}}
}

// SetPeers replaces the membership (Self is added when missing). Pools of
// peers that left are closed.
func (c *Cluster) SetPeers(peers []string) {
	ps := slices.Clone(peers)
	if !slices.Contains(ps, c.cfg.Self) {
		ps = append(ps, c.cfg.Self)
	}
	slices.Sort(ps)
	ps = slices.Compact(ps)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.peers = ps
	for addr, p := range c.pools {
		if !slices.Contains(ps, addr) {
			p.close()
			delete(c.pools, addr)
		}
	}
}

// Peers returns the current membership.
func (c *Cluster) Peers() []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return slices.Clone(c.peers)
}

// Owners returns the nodes that hold key, most preferred first.
func (c *Cluster) Owners(key string) []string {
	c.mu.RLock()
	peers := c.peers
	c.mu.RUnlock()
	type scored struct {
		addr  string
		score uint64
	}
	s := make([]scored, len(peers))
	for i, p := range peers {
		d := xxhash.New()
		_, _ = d.WriteString(p)
		_, _ = d.WriteString("\x00")
		_, _ = d.WriteString(key)
		s[i] = scored{p, d.Sum64()}
	}
	slices.SortFunc(s, func(a, b scored) int {
		switch {
		case a.score > b.score:
			return -1
		case a.score < b.score:
			return 1
		}
		return 0
	})
	n := min(c.cfg.Replicas, len(s))
	out := make([]string, n)
	for i := range n {
		out[i] = s[i].addr
	}
	return out
}

func (c *Cluster) pool(addr string) *pool {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.pools[addr]
	if !ok {
		p = newPool(addr, c.cfg)
		c.pools[addr] = p
	}
	return p
}

func (c *Cluster) local0(owners []string) bool { return slices.Contains(owners, c.cfg.Self) }

// Local serves the node's own store with the Cluster's signatures: what
// the peer listener uses, so a forwarded request is never forwarded again.
type Local struct{ Mem LocalStore }

// Get implements the lm:// server's backend.
func (l Local) Get(_ context.Context, key string) (*store.Object, bool) { return l.Mem.Get(key) }

// Put implements the lm:// server's backend.
func (l Local) Put(_ context.Context, key string, obj *store.Object) bool { return l.Mem.Put(key, obj) }

// Contains implements the lm:// server's backend.
func (l Local) Contains(_ context.Context, key string) bool { return l.Mem.Contains(key) }

// Get returns key's object from this node when it is an owner, else from
// the first owner that answers. A peer that fails costs a miss.
func (c *Cluster) Get(ctx context.Context, key string) (*store.Object, bool) {
	owners := c.Owners(key)
	if c.local0(owners) {
		if obj, ok := c.local.Get(key); ok {
			return obj, true
		}
		if len(owners) == 1 {
			return nil, false
		}
	}
	for _, o := range owners {
		if o == c.cfg.Self {
			continue
		}
		p := c.pool(o)
		if !p.health.allow(c.cfg.Now()) {
			c.forwarded.WithLabelValues("get", "skipped").Inc()
			continue
		}
		val, meta, err := p.get(ctx, key)
		p.health.record(c.cfg.Now(), err)
		switch {
		case err == nil:
			c.forwarded.WithLabelValues("get", "hit").Inc()
			return &store.Object{Value: val, Meta: meta}, true
		case errors.Is(err, lmproto.ErrMiss):
			c.forwarded.WithLabelValues("get", "miss").Inc()
		default:
			c.forwarded.WithLabelValues("get", "error").Inc()
		}
	}
	return nil, false
}

// Put stores obj on every owner: locally when this node is one, forwarded
// otherwise. A peer that fails loses that copy (counted), not the request.
func (c *Cluster) Put(ctx context.Context, key string, obj *store.Object) bool {
	stored := false
	for _, o := range c.Owners(key) {
		if o == c.cfg.Self {
			stored = c.local.Put(key, obj) || stored
			continue
		}
		p := c.pool(o)
		if !p.health.allow(c.cfg.Now()) {
			c.forwarded.WithLabelValues("put", "skipped").Inc()
			continue
		}
		err := p.put(ctx, key, obj)
		p.health.record(c.cfg.Now(), err)
		if err != nil {
			c.forwarded.WithLabelValues("put", "error").Inc()
			continue
		}
		c.forwarded.WithLabelValues("put", "ok").Inc()
		stored = true
	}
	return stored
}

// Contains reports whether any owner holds key.
func (c *Cluster) Contains(ctx context.Context, key string) bool {
	for _, o := range c.Owners(key) {
		if o == c.cfg.Self {
			if c.local.Contains(key) {
				return true
			}
			continue
		}
		p := c.pool(o)
		if !p.health.allow(c.cfg.Now()) {
			c.forwarded.WithLabelValues("exist", "skipped").Inc()
			continue
		}
		ok, err := p.exist(ctx, key)
		p.health.record(c.cfg.Now(), err)
		switch {
		case err != nil:
			c.forwarded.WithLabelValues("exist", "error").Inc()
		case ok:
			c.forwarded.WithLabelValues("exist", "hit").Inc()
			return true
		default:
			c.forwarded.WithLabelValues("exist", "miss").Inc()
		}
	}
	return false
}

// pool is a bounded set of lm:// clients to one peer, and the peer's
// health.
type pool struct {
	idle    chan *lmproto.Client
	mk      func() *lmproto.Client
	timeout time.Duration
	health  health
}

func newPool(addr string, cfg Config) *pool {
	p := &pool{idle: make(chan *lmproto.Client, cfg.ConnsPerPeer), timeout: cfg.Timeout,
		health: health{eject: cfg.FailuresToEject, min: cfg.Backoff, max: cfg.MaxBackoff, probe: cfg.Timeout}}
	p.mk = func() *lmproto.Client { return lmproto.Dial(addr, cfg.Timeout, cfg.MaxValueBytes) }
	for range cfg.ConnsPerPeer {
		p.idle <- p.mk()
	}
	return p
}

// with runs f on an idle client under the forward deadline, derived from
// the request's context so a request given up on stops its forward too.
// Waiting for an idle client counts against the deadline: a pool whose
// clients all hang on a peer fails the next request in time too.
func (p *pool) with(ctx context.Context, f func(*lmproto.Client) error) error {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	var c *lmproto.Client
	select {
	case c = <-p.idle:
	case <-ctx.Done():
		return fmt.Errorf("cluster: no idle connection to the peer: %w", ctx.Err())
	}
	defer func() { p.idle <- c }()
	return f(c)
}

// health ejects a failing peer: after eject consecutive failures it is
// down for a backoff; when that ends one request probes it (the others
// still skip it for up to probe, the forward deadline), and a failed probe
// doubles the backoff up to max. Any success resets it. A miss is a
// success: the peer answered.
type health struct {
	eject     int
	min, max  time.Duration
	probe     time.Duration
	mu        sync.Mutex
	failures  int
	backoff   time.Duration
	downUntil time.Time
	probing   bool
}

// allow reports whether a request may go to the peer now.
func (h *health) allow(now time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.failures < h.eject {
		return true
	}
	if now.Before(h.downUntil) {
		return false
	}
	h.downUntil = now.Add(h.probe) // this request probes; the rest keep skipping
	h.probing = true
	return true
}

// record notes a forward's outcome. Only the failure that ejects the peer
// and a failed probe set the backoff: requests already in flight when the
// peer was ejected fail too, and must not double it each.
func (h *health) record(now time.Time, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err == nil || errors.Is(err, lmproto.ErrMiss) {
		h.failures, h.backoff, h.probing = 0, 0, false
		return
	}
	h.failures++
	if h.failures != h.eject && !h.probing {
		return
	}
	h.probing = false
	h.backoff = min(max(2*h.backoff, h.min), h.max)
	h.downUntil = now.Add(h.backoff)
}

func (p *pool) get(ctx context.Context, key string) ([]byte, lmproto.Meta, error) {
	var val []byte
	var meta lmproto.Meta
	err := p.with(ctx, func(c *lmproto.Client) error {
		var err error
		val, meta, err = c.Get(ctx, key)
		return err
	})
	return val, meta, err
}

// errNotStored: the owner took the PUT but does not hold the key (it
// refused the object, e.g. larger than a memory shard).
var errNotStored = errors.New("cluster: owner did not store the object")

// put forwards a PUT and confirms it with an EXIST on the same connection:
// lm:// PUT has no reply, and the peer serves a connection's requests in
// order, so the EXIST's answer means the PUT was applied. Without it a
// RESP SET could answer OK before the owner holds the key, and a read
// through another pooled connection could miss it.
func (p *pool) put(ctx context.Context, key string, obj *store.Object) error {
	return p.with(ctx, func(c *lmproto.Client) error {
		if err := c.Put(ctx, key, obj.Meta, obj.Value); err != nil {
			return err
		}
		ok, err := c.Exist(ctx, key)
		if err == nil && !ok {
			err = errNotStored
		}
		return err
	})
}

func (p *pool) exist(ctx context.Context, key string) (bool, error) {
	var ok bool
	err := p.with(ctx, func(c *lmproto.Client) error {
		var err error
		ok, err = c.Exist(ctx, key)
		return err
	})
	return ok, err
}

func (p *pool) close() {
	for {
		select {
		case c := <-p.idle:
			_ = c.Close()
		default:
			return
		}
	}
}
