package kvzmq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/warmpath/warmpath/libs/kvevents"
)

// ErrClosed is returned by Publish after Close.
var ErrClosed = errors.New("kvzmq: publisher closed")

// drainTimeout is how long Close waits for queued batches to be sent, as
// vLLM's SHUTDOWN_TIMEOUT.
const drainTimeout = time.Second

// Redialing of a connecting PUB socket (see keepConnected).
const (
	redialCheck = 250 * time.Millisecond
	minBackoff  = time.Second
	maxBackoff  = 30 * time.Second
	dialTimeout = 5 * time.Second // per TCP connect attempt
)

// PublisherStats are a Publisher's counters since it started.
type PublisherStats struct {
	// Published counts batches handed to the PUB socket. The socket itself
	// may still drop them (HWM, no subscriber), as ZMQ PUB does.
	Published uint64
	// Dropped counts batches not sent live because the send queue was full
	// or the send failed. They keep their sequence number and stay in the
	// replay buffer, so a subscriber sees a gap and can replay them.
	Dropped uint64
	// Replays counts well-formed replay requests received.
	Replays uint64
}

// Publisher publishes event batches the way vLLM's ZmqEventPublisher does: a
// PUB socket sending [topic, seq, payload] with seq counting from 0, and an
// optional ROUTER socket replaying the last BufferSteps batches on request.
//
// Publish is safe for concurrent use and never waits on the network: batches
// go through a bounded queue to a sending goroutine. Unlike vLLM, whose
// publish blocks while its queue is full, a full queue drops the live send.
// A Publisher must not be copied.
type Publisher struct {
	log    *slog.Logger
	enc    kvevents.Encoding
	topic  string
	pub    zmq4.Socket
	router zmq4.Socket // nil without a replay endpoint
	ctx    context.Context
	cancel context.CancelFunc

	sent       chan struct{} // closed when the sender has exited
	replayDone chan struct{} // closed when the replay server has exited

	mu     sync.Mutex // guards seq, buf, closed and sends on queue
	seq    uint64
	buf    ring
	closed bool
	queue  chan kvevents.Message

	published, dropped, replays atomic.Uint64

	closeOnce sync.Once
	closeErr  error
}

// NewPublisher opens the sockets of cfg and starts publishing. The PUB socket
// binds cfg.Endpoint when ShouldBind says so ("tcp://*:0" binds a free port;
// see Addr) and otherwise connects in the background, retrying and
// reconnecting for as long as the publisher lives, as libzmq does. The replay
// socket, when cfg.ReplayEndpoint is set, always binds. cfg.EnableKVCacheEvents
// and cfg.Publisher are not consulted: whether to publish at all is the
// caller's decision (see Config.Enabled).
//
// ctx bounds the life of the sockets; Close must be called either way. log
// may be nil.
func NewPublisher(ctx context.Context, cfg Config, enc kvevents.Encoding, log *slog.Logger) (*Publisher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if enc != kvevents.Positional && enc != kvevents.MapEncoding {
		return nil, fmt.Errorf("kvzmq: unknown encoding %d", int(enc))
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("endpoint", cfg.Endpoint, "topic", cfg.Topic)
	ctx, cancel := context.WithCancel(ctx)
	p := &Publisher{
		log:        log,
		enc:        enc,
		topic:      cfg.Topic,
		ctx:        ctx,
		cancel:     cancel,
		sent:       make(chan struct{}),
		replayDone: make(chan struct{}),
		buf:        ring{limit: cfg.BufferSteps},
		queue:      make(chan kvevents.Message, cfg.MaxQueueSize),
	}
	zlog := slog.NewLogLogger(log.Handler(), slog.LevelWarn)
	bind := ShouldBind(cfg.Endpoint)
	opts := []zmq4.Option{zmq4.WithLogger(zlog)}
	if !bind {
		// keepConnected redials; each of its dials retries until it
		// connects or the publisher closes.
		opts = append(opts, zmq4.WithDialerMaxRetries(-1), zmq4.WithDialerTimeout(dialTimeout))
	}
	p.pub = zmq4.NewPub(ctx, opts...)
	if err := p.pub.SetOption(zmq4.OptionHWM, cfg.HWM); err != nil {
		p.abort()
		return nil, fmt.Errorf("kvzmq: set hwm: %w", err)
	}
	if bind {
		if err := p.pub.Listen(guarded(cfg.Endpoint)); err != nil {
			p.abort()
			return nil, fmt.Errorf("kvzmq: bind %s: %w", cfg.Endpoint, err)
		}
	} else {
		go p.keepConnected(cfg.Endpoint)
	}
	if cfg.ReplayEndpoint != "" {
		p.router = zmq4.NewRouter(ctx, zmq4.WithLogger(zlog))
		if err := p.router.Listen(guarded(cfg.ReplayEndpoint)); err != nil {
			p.abort()
			return nil, fmt.Errorf("kvzmq: bind replay %s: %w", cfg.ReplayEndpoint, err)
		}
		go p.serveReplays()
	} else {
		close(p.replayDone)
	}
	go p.send()
	return p, nil
}

// abort releases what NewPublisher opened before it failed.
func (p *Publisher) abort() {
	p.cancel()
	_ = p.pub.Close()
	if p.router != nil {
		_ = p.router.Close()
	}
}

// keepConnected dials the PUB socket and redials, one dial at a time,
// whenever it has had no subscription for a moment: the peer went away, or a
// dial connected but the ZMTP handshake failed (a listener that was closing),
// or it reached a socket that is gone. zmq4's own automatic reconnect stops
// for good after a failed handshake, where libzmq (and so vLLM) keeps trying.
// A subscriber that is connected but subscribes to nothing gets redialed too;
// the growing backoff bounds the extra connections to one per maxBackoff.
func (p *Publisher) keepConnected(endpoint string) {
	defer p.recoverPanic("redial")
	topics, _ := p.pub.(zmq4.Topics)
	ticker := time.NewTicker(redialCheck)
	defer ticker.Stop()
	dialed := make(chan error, 1)
	dialing, lastDial, backoff := true, time.Now(), minBackoff
	dial := func() {
		defer func() {
			if v := recover(); v != nil {
				dialed <- fmt.Errorf("dial panicked: %v", v)
			}
		}()
		dialed <- p.pub.Dial(guarded(endpoint))
	}
	go dial()
	for {
		select {
		case <-p.ctx.Done():
			return
		case err := <-dialed:
			dialing = false
			if err != nil && p.ctx.Err() == nil {
				p.log.Warn("kvzmq: dial failed", "err", err)
			}
		case <-ticker.C:
			if topics == nil || len(topics.Topics()) > 0 {
				backoff = minBackoff
				continue
			}
			if dialing || time.Since(lastDial) < backoff {
				continue
			}
			p.log.Info("kvzmq: no subscriber, redialing")
			backoff = min(2*backoff, maxBackoff)
			dialing, lastDial = true, time.Now()
			go dial()
		}
	}
}

// Publish assigns b the next sequence number, encodes it, keeps it for
// replay and queues it for sending under the configured topic. A nil
// b.DataParallelRank is sent as 0, as vLLM's publisher fills in its own rank.
// It returns an encoding error, or ErrClosed after Close; a full queue is not
// an error (see Stats).
func (p *Publisher) Publish(b kvevents.Batch) error { return p.PublishTopic(p.topic, b) }

// PublishTopic is Publish under topic instead of the configured one, for a
// publisher whose messages concern several subjects (the cache server names
// the model in each). Sequence numbers stay one counter for the whole
// publisher, so a subscriber to every topic still sees no gaps; a replay
// returns each batch under the topic it was published with.
func (p *Publisher) PublishTopic(topic string, b kvevents.Batch) error {
	if b.DataParallelRank == nil {
		var rank int64
		b.DataParallelRank = &rank
	}
	payload, err := kvevents.EncodeBatch(b, p.enc)
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	m := kvevents.Message{Topic: topic, Seq: p.seq, Payload: payload}
	p.seq++
	p.buf.push(m)
	select {
	case p.queue <- m:
	default:
		if n := p.dropped.Add(1); n == 1 || n%1000 == 0 {
			p.log.Warn("kvzmq: send queue full, dropping live batches", "dropped", n)
		}
	}
	return nil
}

// send hands queued messages to the PUB socket until Close closes the queue.
func (p *Publisher) send() {
	defer close(p.sent)
	defer p.recoverPanic("send")
	for m := range p.queue {
		if err := p.pub.SendMulti(zmq4.NewMsgFrom(m.Frames()...)); err != nil {
			p.dropped.Add(1)
			p.log.Warn("kvzmq: send failed", "seq", m.Seq, "err", err)
			continue
		}
		p.published.Add(1)
	}
}

func (p *Publisher) recoverPanic(what string) {
	if v := recover(); v != nil {
		p.log.Error("kvzmq: publisher goroutine panicked", "goroutine", what, "panic", v)
	}
}

// Addr returns the address the PUB socket is bound to (with the real port
// when the endpoint asked for port 0), or nil when it connects.
func (p *Publisher) Addr() net.Addr { return p.pub.Addr() }

// ReplayAddr returns the address the replay socket is bound to, or nil
// without a replay endpoint.
func (p *Publisher) ReplayAddr() net.Addr {
	if p.router == nil {
		return nil
	}
	return p.router.Addr()
}

// Sequenced returns how many batches have been given a sequence number:
// those published, dropped and still queued. A subscriber that has applied
// (or replayed, or counted as lost) this many has seen every batch so far.
func (p *Publisher) Sequenced() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seq
}

// Stats returns the publisher's counters. It is safe for concurrent use.
func (p *Publisher) Stats() PublisherStats {
	return PublisherStats{
		Published: p.published.Load(),
		Dropped:   p.dropped.Load(),
		Replays:   p.replays.Load(),
	}
}

// Close stops accepting batches, waits up to one second for queued ones to be
// sent, then closes the sockets. It is safe to call more than once; later
// calls return the first call's result.
func (p *Publisher) Close() error {
	p.closeOnce.Do(func() {
		p.mu.Lock()
		p.closed = true
		close(p.queue)
		p.mu.Unlock()

		timer := time.NewTimer(drainTimeout)
		defer timer.Stop()
		select {
		case <-p.sent:
		case <-timer.C:
			p.log.Warn("kvzmq: closing with batches still queued", "queued", len(p.queue))
		}
		p.cancel()
		err := ignoreClosed(p.pub.Close())
		if p.router != nil {
			if rerr := ignoreClosed(p.router.Close()); err == nil {
				err = rerr
			}
			select {
			case <-p.replayDone:
			case <-time.After(drainTimeout): // stuck writing to a client
			}
		}
		if err != nil {
			p.closeErr = fmt.Errorf("kvzmq: close publisher: %w", err)
		}
	})
	return p.closeErr
}

// ignoreClosed drops the error zmq4 reports for connections a peer already
// closed.
func ignoreClosed(err error) error {
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// ring keeps the last limit published messages for replay. Payloads are
// never modified after encoding, so snapshots may share them.
type ring struct {
	limit int                // capacity; 0 keeps nothing
	items []kvevents.Message // oldest at head once full
	head  int
}

func (r *ring) push(m kvevents.Message) {
	if r.limit <= 0 {
		return
	}
	if len(r.items) < r.limit {
		r.items = append(r.items, m)
		return
	}
	r.items[r.head] = m
	r.head = (r.head + 1) % r.limit
}

// since returns the buffered messages with Seq >= seq, oldest first.
func (r *ring) since(seq uint64) []kvevents.Message {
	var out []kvevents.Message
	for i := range r.items {
		m := r.items[(r.head+i)%len(r.items)]
		if m.Seq >= seq {
			out = append(out, m)
		}
	}
	return out
}
