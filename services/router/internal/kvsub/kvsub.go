// Package kvsub subscribes to every worker's KV-cache events over ZMQ and
// feeds them into the kvaware index, in either topology vLLM supports:
//
//   - dial: the router dials each discovered worker's PUB socket (vLLM
//     binds it: `"endpoint": "tcp://*:5557"`), one SUB per worker, so the
//     connection names the worker;
//   - bind: the router binds one SUB socket and every worker connects to it
//     (`"endpoint": "tcp://router:5557"`); each worker's topic names it.
//
// Gaps and late joins are repaired through the worker's replay socket.
package kvsub

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/warmpath/warmpath/libs/kvevents"
	"github.com/warmpath/warmpath/libs/kvevents/kvzmq"
	"github.com/warmpath/warmpath/libs/zmtpguard"
	"github.com/warmpath/warmpath/services/router/internal/zsub"
	"github.com/warmpath/warmpath/services/router/kvindex"
)

// Config says where workers publish. Endpoints are templates over the
// worker's base URL: {host} is its host, {port} its HTTP port, and
// {port+N} / {port-N} that port offset by N. An empty Endpoint disables
// the subscriber.
type Config struct {
	// Endpoint of each worker's PUB socket, e.g. "tcp://{host}:5557"
	// (dial topology).
	Endpoint string
	// Bind is the router's own SUB address workers connect to, e.g.
	// "tcp://0.0.0.0:5557" (bind topology). Each worker's topic must name
	// it: its base URL ("http://10.0.0.5:8000") or "kv@<host:port>@..."
	// ("kv@<host>@..." when one worker runs on that host).
	Bind string
	// ReplayEndpoint of each worker's replay (ROUTER) socket, e.g.
	// "tcp://{host}:5558"; empty: gaps are counted, not repaired.
	ReplayEndpoint string
	// ReplayTimeout bounds one replay request (5s).
	ReplayTimeout time.Duration
	// RetryInterval is the first wait before dialing a worker again
	// (1s, doubling to 30s; zsub.Backoff).
	RetryInterval time.Duration
	// MaxFrameBytes bounds one ZMTP frame a peer may announce on any event
	// or replay connection (zmtpguard.DefaultMaxFrame, 4 MiB);
	// MaxMessageBytes one multipart message (16 MiB). A peer announcing
	// more is disconnected before anything is allocated.
	MaxFrameBytes, MaxMessageBytes uint64
	// HandshakeTimeout bounds a peer's ZMTP handshake (10s).
	HandshakeTimeout time.Duration
	// Tiers says how each tier of every worker is known: from full events
	// (vLLM's GPU cache), from stores alone with a view bounded by the
	// tier's capacity (current LMCache's CPU tier), or from the router's
	// own routing (an LMCache that publishes nothing). The zero value
	// trusts every tier's events to report removals.
	Tiers [kvindex.NumTiers]kvindex.TierPolicy
}

// Worker is what the subscriber needs to know about a worker.
type Worker interface {
	// Models are the models the worker serves; empty until probed.
	Models() []string
	// ModelsChanged returns a channel closed the next time the models are
	// set, taken before reading Models: a subscription waits on it for
	// the worker's first models instead of polling.
	ModelsChanged() <-chan struct{}
}

// Store is where workers' index changes go: the in-memory kvindex.Index
// or a shared one (kvredis).
type Store interface {
	kvindex.Sink
	Forget(worker string) error
	Stats() kvindex.Stats
}

// Manager runs one subscription per worker.
type Manager struct {
	cfg Config
	idx Store
	log *slog.Logger

	mu   sync.Mutex
	subs map[string]*subscription
	// unknownTopic counts bind-topology messages naming no known worker.
	unknownTopic atomic.Uint64
	// bound is the bind topology's listening address, once listening.
	bound atomic.Pointer[net.Addr]
	// scheme is the zmq4 transport every tcp:// endpoint goes through: TCP
	// behind zmtpguard's limits.
	scheme string
	guard  guardStats
}

// guardStats counts connections zmtpguard failed and rate-limits the
// warnings about them: a hostile peer reconnecting in a loop must not
// flood the log.
type guardStats struct {
	oversizeFrames, oversizeMessages, handshakeTimeouts atomic.Uint64
	lastWarn                                            atomic.Int64 // unix nanoseconds
	suppressed                                          atomic.Uint64
}

// guardWarnEvery is the least time between two warnings about rejected
// peers; the ones in between are counted in the next warning.
const guardWarnEvery = 10 * time.Second

type subscription struct {
	url      string // the worker's base URL
	cancel   context.CancelFunc
	done     chan struct{}
	counters *kvindex.Counters
	conn     *connState
	// Bind topology: the worker's feed, built on its first message and
	// used only by the listener goroutine.
	worker Worker
	feed   *kvindex.Feed
	// kw is the worker's index state once its feed exists, for routing
	// notes and /debug/endpoints from other goroutines.
	kw atomic.Pointer[kvindex.Worker]
	// restarted is set by Restarted and taken by the goroutine feeding
	// the worker, which restarts its feed before the next message.
	restarted atomic.Bool
	// rejectsLogged and rejectLogAt rate-limit the warning about events
	// the index rejected; only the goroutine feeding the worker uses them.
	rejectsLogged uint64
	rejectLogAt   time.Time
}

// rejectWarnEvery is the least time between two warnings about one
// worker's rejected events.
const rejectWarnEvery = 10 * time.Second

// noteRejections warns, at most every rejectWarnEvery per worker, when
// the index rejected events since the last warning: an operator whose
// kvaware routing finds nothing must be able to see why in the log, not
// only in a counter.
func (m *Manager) noteRejections(s *subscription, now time.Time) {
	n := s.counters.Rejected()
	if n == s.rejectsLogged || now.Sub(s.rejectLogAt) < rejectWarnEvery {
		return
	}
	r := s.counters.LastRejection()
	args := []any{"worker", s.url, "rejected", n - s.rejectsLogged, "total", n}
	if r != nil {
		args = append(args, "reason", r.Reason, "detail", r.Detail)
	}
	m.log.Warn("kv events: events rejected; these blocks are not indexed", args...)
	s.rejectsLogged, s.rejectLogAt = n, now
}

// connState records whether a subscription is connected, for
// /debug/endpoints.
type connState struct {
	mu        sync.Mutex
	connected bool
	lastErr   string
	lastEvent time.Time
}

// New returns a manager feeding idx.
func New(cfg Config, idx Store, log *slog.Logger) *Manager {
	if cfg.ReplayTimeout <= 0 {
		cfg.ReplayTimeout = 5 * time.Second
	}
	if cfg.RetryInterval <= 0 {
		cfg.RetryInterval = time.Second
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m := &Manager{cfg: cfg, idx: idx, log: log, subs: map[string]*subscription{}, scheme: "tcp"}
	scheme, err := zmtpguard.Register(zmtpguard.Limits{
		MaxFrame: cfg.MaxFrameBytes, MaxMessage: cfg.MaxMessageBytes, HandshakeTimeout: cfg.HandshakeTimeout,
	}, m.rejected)
	if err != nil {
		// Only a duplicate name fails, and Register numbers its names.
		log.Error("kv events: no frame-size guard; peers can announce frames of any size", "err", err)
	} else {
		m.scheme = scheme
	}
	return m
}

// rejected counts and logs a connection zmtpguard failed.
func (m *Manager) rejected(r zmtpguard.Rejection) {
	var le *zmtpguard.LimitError
	switch {
	case errors.As(r.Err, &le) && le.What == "message":
		m.guard.oversizeMessages.Add(1)
	case le != nil:
		m.guard.oversizeFrames.Add(1)
	default:
		m.guard.handshakeTimeouts.Add(1)
	}
	now, last := time.Now().UnixNano(), m.guard.lastWarn.Load()
	if now-last < int64(guardWarnEvery) || !m.guard.lastWarn.CompareAndSwap(last, now) {
		m.guard.suppressed.Add(1)
		return
	}
	peer := ""
	if r.Peer != nil {
		peer = r.Peer.String()
	}
	m.log.Warn("kv events: dropped a peer's connection", "peer", peer, "err", r.Err,
		"alsoDroppedSinceLastWarning", m.guard.suppressed.Swap(0))
}

// GuardStats are the connections the frame-size guard dropped.
type GuardStats struct {
	OversizeFrames, OversizeMessages, HandshakeTimeouts uint64
}

// GuardStats returns the connections dropped so far for breaking a limit.
func (m *Manager) GuardStats() GuardStats {
	return GuardStats{
		OversizeFrames:    m.guard.oversizeFrames.Load(),
		OversizeMessages:  m.guard.oversizeMessages.Load(),
		HandshakeTimeouts: m.guard.handshakeTimeouts.Load(),
	}
}

// Enabled reports whether workers are subscribed to.
func (m *Manager) Enabled() bool { return m.cfg.Endpoint != "" || m.cfg.Bind != "" }

// Start subscribes to the worker at workerURL until ctx ends or Stop.
func (m *Manager) Start(ctx context.Context, workerURL string, w Worker) {
	if !m.Enabled() {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.subs[workerURL]; ok {
		return
	}
	ctx, cancel := context.WithCancel(ctx)
	s := &subscription{url: workerURL, cancel: cancel, done: make(chan struct{}), counters: &kvindex.Counters{}, conn: &connState{}, worker: w}
	m.subs[workerURL] = s
	if m.cfg.Bind != "" {
		close(s.done) // the listener feeds it
		return
	}
	go func() {
		defer close(s.done)
		m.run(ctx, workerURL, w, s)
	}()
}

// Stop ends the worker's subscription and drops what the index holds for
// it: a worker that left no longer caches anything the router can use.
func (m *Manager) Stop(workerURL string) {
	m.mu.Lock()
	s, ok := m.subs[workerURL]
	delete(m.subs, workerURL)
	m.mu.Unlock()
	if ok {
		s.cancel()
		<-s.done
	}
	if err := m.idx.Forget(workerURL); err != nil {
		m.log.Warn("kv events: could not drop a departed worker's blocks", "worker", workerURL, "err", err)
	}
}

// Restarted drops what the index holds for a worker that restarted (its
// health went down and came back, or its process is new), at once: in the
// bind topology a restarted worker may publish nothing for a long time,
// and until then the router would credit an empty cache. The worker's
// next message starts its stream afresh.
func (m *Manager) Restarted(workerURL string) {
	if !m.Enabled() {
		return
	}
	m.mu.Lock()
	s, ok := m.subs[workerURL]
	m.mu.Unlock()
	if ok {
		s.restarted.Store(true)
		// The worker's own state too, which /debug/kv/held shows: a dead
		// worker sends nothing that would reset it.
		if w := s.kw.Load(); w != nil {
			w.Reset()
		}
	}
	if err := m.idx.Forget(workerURL); err != nil {
		m.log.Warn("kv events: could not drop a restarted worker's blocks", "worker", workerURL, "err", err)
	}
}

// Wait waits for every subscription to end (after their context ended).
func (m *Manager) Wait() {
	m.mu.Lock()
	subs := make([]*subscription, 0, len(m.subs))
	for _, s := range m.subs {
		subs = append(subs, s)
	}
	m.mu.Unlock()
	for _, s := range subs {
		<-s.done
	}
}

// Health is one worker's event-stream state.
type Health struct {
	Connected bool      `json:"connected"`
	LastEvent time.Time `json:"lastEvent,omitzero"`
	LastError string    `json:"lastError,omitempty"`
	Batches   uint64    `json:"batches"`
	Events    uint64    `json:"events"`
	Gaps      uint64    `json:"gaps"`
	Replays   uint64    `json:"replays"`
	Lost      uint64    `json:"lostBatches"`
	Restarts  uint64    `json:"restarts"`
	Errors    uint64    `json:"decodeErrors"`
	// Rejected counts BlockStored events the index could not take;
	// LastRejection says why the latest was refused.
	Rejected      uint64             `json:"rejectedEvents"`
	LastRejection *kvindex.Rejection `json:"lastRejection,omitempty"`
	// Tiers is the router's view of each tier: blocks and tokens known,
	// where the knowledge comes from, the capacity it is kept within.
	Tiers map[string]kvindex.TierView `json:"tiers,omitempty"`
}

// newWorker is the index state of one worker, with the configured tier
// policies, published on s for Prefilled, Held and Health.
func (m *Manager) newWorker(s *subscription, url, model string) *kvindex.Worker {
	w := kvindex.NewWorker(m.idx, url, model, s.counters)
	for t, p := range m.cfg.Tiers {
		w.SetTier(kvindex.Tier(t), p)
	}
	s.kw.Store(w)
	return w
}

// Prefilled implements strategy.PrefillObserver: worker finished the
// prefill of a prompt of these block keys that kvaware sent it, so views
// of tiers that do not report removals, or nothing, stay in LMCache's
// order. Safe for concurrent use; a worker without a feed yet is skipped.
func (m *Manager) Prefilled(worker string, keys []uint64) {
	if w := m.indexState(worker); w != nil {
		w.Prefilled(keys)
	}
}

// Held returns the engine hashes the router's view of worker holds in
// tier (nil, false for a worker without a feed yet).
func (m *Manager) Held(worker string, tier kvindex.Tier) ([]uint64, bool) {
	w := m.indexState(worker)
	if w == nil {
		return nil, false
	}
	return w.Held(tier), true
}

// indexState is worker's index state; nil before its feed exists.
func (m *Manager) indexState(worker string) *kvindex.Worker {
	m.mu.Lock()
	s := m.subs[worker]
	m.mu.Unlock()
	if s == nil {
		return nil
	}
	return s.kw.Load()
}

// Health returns each subscribed worker's stream state.
func (m *Manager) Health() map[string]Health {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]Health, len(m.subs))
	for u, s := range m.subs {
		s.conn.mu.Lock()
		h := Health{Connected: s.conn.connected, LastEvent: s.conn.lastEvent, LastError: s.conn.lastErr}
		s.conn.mu.Unlock()
		c := s.counters
		h.Batches, h.Events, h.Gaps, h.Replays, h.Lost = c.Batches.Load(), c.Events.Load(), c.Gaps.Load(), c.Replays.Load(), c.Lost.Load()
		h.Restarts, h.Errors = c.Restarts.Load(), c.DecodeErrors.Load()
		if w := s.kw.Load(); w != nil {
			tv := w.Tiers()
			h.Tiers = make(map[string]kvindex.TierView, len(tv))
			for t, v := range tv {
				h.Tiers[kvindex.Tier(t).String()] = v
			}
		}
		h.Rejected, h.LastRejection = c.Rejected(), c.LastRejection()
		out[u] = h
	}
	return out
}

// Counters returns each subscribed worker's counters (live values).
func (m *Manager) Counters() map[string]*kvindex.Counters {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]*kvindex.Counters, len(m.subs))
	for u, s := range m.subs {
		out[u] = s.counters
	}
	return out
}

func (m *Manager) run(ctx context.Context, workerURL string, w Worker, s *subscription) {
	log := m.log.With("worker", workerURL)
	endpoint, err := Expand(m.cfg.Endpoint, workerURL)
	if err != nil {
		log.Error("kv events: bad endpoint template", "err", err)
		return
	}
	var replay kvindex.Replayer
	if m.cfg.ReplayEndpoint != "" {
		re, err := Expand(m.cfg.ReplayEndpoint, workerURL)
		if err != nil {
			log.Error("kv events: bad replay endpoint template", "err", err)
			return
		}
		replay = replayer{endpoint: zmtpguard.Endpoint(m.scheme, re), timeout: m.cfg.ReplayTimeout}
	}
	// Keys are seeded by the model, known once the worker was probed. A
	// worker that never answers its probe is waited for until it is
	// stopped (ctx): no subscription is of use without its model.
	model, err := firstModel(ctx, w)
	if err != nil {
		return
	}
	feed := kvindex.NewFeed(m.newWorker(s, workerURL, model), replay)
	backoff := zsub.Backoff{First: m.cfg.RetryInterval}
	for ctx.Err() == nil {
		start := time.Now()
		err := m.subscribe(ctx, endpoint, feed, s, log)
		s.conn.set(false, err)
		if ctx.Err() != nil {
			return
		}
		wait := backoff.Next(time.Since(start))
		log.Warn("kv events: subscription lost; retrying", "endpoint", endpoint, "err", err, "in", wait)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// firstModel waits until w serves a model and returns the first, or
// ctx's error.
func firstModel(ctx context.Context, w Worker) (string, error) {
	for {
		changed := w.ModelsChanged()
		if ms := w.Models(); len(ms) > 0 {
			return ms[0], nil
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("waiting for the worker's models: %w", ctx.Err())
		case <-changed:
		}
	}
}

func (c *connState) set(connected bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.connected = connected
	if err != nil {
		c.lastErr = err.Error()
	}
}

// subscribe dials endpoint and feeds messages until the socket fails or
// ctx ends.
func (m *Manager) subscribe(ctx context.Context, endpoint string, feed *kvindex.Feed, s *subscription, log *slog.Logger) error {
	conn := s.conn
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sub, err := zsub.Dial(sctx, zmtpguard.Endpoint(m.scheme, endpoint), "")
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("%s: %w", endpoint, err)
	}
	defer sub.Close()
	conn.set(true, nil)
	log.Info("kv events: subscribed", "endpoint", endpoint)
	// Catch up on what happened before this subscription; live messages
	// received meanwhile wait in the socket. After a restart the index
	// was cleared, so catch up from the start.
	if s.restarted.Swap(false) {
		feed.Restart()
	}
	if err := feed.Sync(ctx); err != nil {
		log.Warn("kv events: catching up through replay failed; some blocks are not indexed", "err", err)
	}
	for {
		msg, err := sub.Recv()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, io.EOF) {
			// The one publisher this socket dialed went away (a restart, a
			// network cut): dial again, then catch up through replay.
			return errors.New("publisher closed the connection")
		}
		if err != nil {
			return fmt.Errorf("receive: %w", err)
		}
		mm, err := kvevents.ParseMessage(msg.Frames)
		if err != nil {
			feed.Worker().Stats().DecodeErrors.Add(1)
			continue
		}
		conn.mu.Lock()
		conn.lastEvent = time.Now()
		conn.mu.Unlock()
		if s.restarted.Swap(false) {
			feed.Restart()
		}
		if err := feed.Handle(ctx, mm); err != nil {
			log.Warn("kv events: replay failed; some blocks are not indexed", "err", err)
		}
		m.noteRejections(s, time.Now())
	}
}

// Listen runs the bind topology's SUB socket until ctx ends; it returns at
// once in the dial topology.
func (m *Manager) Listen(ctx context.Context) error {
	if m.cfg.Bind == "" {
		return nil
	}
	sub := zmq4.NewSub(ctx, zmq4.WithLogger(zsub.Quiet()))
	defer sub.Close()
	if err := sub.SetOption(zmq4.OptionSubscribe, ""); err != nil {
		return fmt.Errorf("kvsub: subscribe: %w", err)
	}
	if err := sub.Listen(zmtpguard.Endpoint(m.scheme, m.cfg.Bind)); err != nil {
		return fmt.Errorf("kvsub: listen %s: %w", m.cfg.Bind, err)
	}
	if a := sub.Addr(); a != nil {
		m.bound.Store(&a)
	}
	m.log.Info("kv events: listening", "addr", m.cfg.Bind)
	for {
		msg, err := sub.Recv()
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, context.Canceled) {
			return fmt.Errorf("kvsub: receive: %w", err) // the socket itself closed
		}
		if err != nil {
			// Any other error is one connection's (a worker went away, the
			// guard dropped a hostile peer); the others stay connected.
			continue
		}
		mm, err := kvevents.ParseMessage(msg.Frames)
		if err != nil {
			m.unknownTopic.Add(1)
			continue
		}
		url, s := m.byTopic(mm.Topic)
		if s == nil {
			m.unknownTopic.Add(1)
			continue
		}
		if s.restarted.Swap(false) && s.feed != nil {
			s.feed.Restart()
		}
		if s.feed == nil {
			ms := s.worker.Models()
			if len(ms) == 0 {
				continue // not probed yet: its first message after that replays this one
			}
			var replay kvindex.Replayer
			if m.cfg.ReplayEndpoint != "" {
				if re, err := Expand(m.cfg.ReplayEndpoint, url); err == nil {
					replay = replayer{endpoint: zmtpguard.Endpoint(m.scheme, re), timeout: m.cfg.ReplayTimeout}
				}
			}
			s.feed = kvindex.NewFeed(m.newWorker(s, url, ms[0]), replay)
			s.conn.set(true, nil)
		}
		s.conn.mu.Lock()
		s.conn.lastEvent = time.Now()
		s.conn.mu.Unlock()
		if err := s.feed.Handle(ctx, mm); err != nil {
			m.log.Warn("kv events: replay failed; some blocks are not indexed", "worker", url, "err", err)
		}
		m.noteRejections(s, time.Now())
	}
}

// BindAddr is the address the bind topology's SUB socket listens on (with
// the real port when Bind asked for port 0), or nil before Listen bound it.
func (m *Manager) BindAddr() net.Addr {
	if a := m.bound.Load(); a != nil {
		return *a
	}
	return nil
}

// byTopic finds the worker a bind-topology topic names.
func (m *Manager) byTopic(topic string) (string, *subscription) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s, ok := m.subs[topic]; ok {
		return topic, s
	}
	rest, ok := strings.CutPrefix(topic, "kv@")
	if !ok {
		return "", nil
	}
	hostPort, _, _ := strings.Cut(rest, "@")
	var foundURL string
	var found *subscription
	for u, s := range m.subs {
		pu, err := url.Parse(u)
		if err != nil {
			continue
		}
		if pu.Host == hostPort {
			return u, s
		}
		if pu.Hostname() == hostPort {
			if found != nil {
				return "", nil // two workers on that host: the topic must name the port
			}
			foundURL, found = u, s
		}
	}
	return foundURL, found
}

// UnknownTopics counts bind-topology messages that named no known worker.
func (m *Manager) UnknownTopics() uint64 { return m.unknownTopic.Load() }

// replayer asks a worker's replay socket for missed batches.
type replayer struct {
	endpoint string
	timeout  time.Duration
}

func (r replayer) Replay(ctx context.Context, from uint64) ([]kvevents.Message, error) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	msgs, err := kvzmq.Replay(ctx, r.endpoint, from)
	if err != nil {
		return msgs, fmt.Errorf("replay from %d: %w", from, err)
	}
	return msgs, nil
}

var portRef = regexp.MustCompile(`\{port([+-][0-9]+)?\}`)

// Expand fills an endpoint template from a worker's base URL.
func Expand(template, workerURL string) (string, error) {
	u, err := url.Parse(workerURL)
	if err != nil {
		return "", fmt.Errorf("worker URL %q: %w", workerURL, err)
	}
	host, port := u.Hostname(), u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "https" {
			port = "443"
		}
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return "", fmt.Errorf("worker URL %q: port: %w", workerURL, err)
	}
	var expandErr error
	out := portRef.ReplaceAllStringFunc(template, func(ref string) string {
		off := 0
		if m := portRef.FindStringSubmatch(ref); m[1] != "" {
			off, _ = strconv.Atoi(m[1])
		}
		if q := p + off; q > 0 && q < 1<<16 {
			return strconv.Itoa(q)
		}
		expandErr = fmt.Errorf("template %q: port %d%+d out of range", template, p, off)
		return ""
	})
	if expandErr != nil {
		return "", expandErr
	}
	h := host
	if ip := net.ParseIP(host); ip != nil && ip.To4() == nil {
		h = "[" + host + "]"
	}
	return regexp.MustCompile(`\{host\}`).ReplaceAllLiteralString(out, h), nil
}
