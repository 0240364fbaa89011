package l2view

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strings"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/warmpath/warmpath/libs/kvevents"
	"github.com/warmpath/warmpath/libs/zmtpguard"
	"github.com/warmpath/warmpath/services/router/internal/zsub"
)

// Why an endpoint's part was rebuilt from its snapshot (the reason label
// of warmpath_router_l2_resyncs_total).
const (
	ReasonConnect  = "connect"   // (re)connected: what happened meanwhile is unknown
	ReasonGap      = "gap"       // a batch was lost (seq skipped, or undecodable)
	ReasonRestart  = "restart"   // seq went backwards: a new server process
	ReasonCleared  = "cleared"   // AllBlocksCleared: the server's queue overflowed
	ReasonNewModel = "new_model" // a model first seen on the stream or asked about
)

// topicPrefix leads every topic a cache server publishes: l2@<model>.
const topicPrefix = "l2@"

// recvBuffer is how many messages wait while a snapshot is fetched; a
// longer fetch blocks the receiver, and ZMQ's high-water mark then drops,
// which the next message shows as a gap.
const recvBuffer = 1024

// endpoint follows one cache server. The fields under "v.mu" are shared
// with Leading, Health and the drop timer; applied and recv belong to the
// goroutine feeding it.
type endpoint struct {
	v    *View
	bit  uint64
	cfg  Endpoint
	log  *slog.Logger
	kick chan struct{}
	// stop ends its goroutine, which closes done; nil until Run starts it.
	stop func()
	done chan struct{}

	// v.mu
	chunks       int
	connected    bool
	gen          uint64 // connections so far: a drop timer acts only on its own
	lastSeq      int64  // last seq received, -1 none
	events       uint64
	decodeErrors uint64
	resyncs      map[string]uint64
	lastErr      string

	// feeding goroutine only
	applied map[string]int64 // model -> seq its part is consistent with
	recv    int64            // last seq received on this connection, -1 none
	floor   int64            // lowest snapshot seq of the connect resync, -1 none
}

func newEndpoint(v *View, i int, e Endpoint) *endpoint {
	return &endpoint{
		v: v, bit: 1 << uint(i), cfg: e, log: v.log.With("endpoint", e.Events),
		kick: make(chan struct{}, 1), lastSeq: -1, resyncs: map[string]uint64{},
		applied: map[string]int64{}, recv: -1, floor: -1,
	}
}

// Run follows every cache server until ctx ends.
func (v *View) Run(ctx context.Context) {
	scheme, err := zmtpguard.Register(v.cfg.Limits, func(r zmtpguard.Rejection) {
		v.log.Warn("l2 view: dropped a cache server's connection", "peer", fmt.Sprint(r.Peer), "err", r.Err)
	})
	if err != nil {
		// Only a duplicate name fails, and Register numbers its names.
		v.log.Error("l2 view: no frame-size guard; cache servers can announce frames of any size", "err", err)
		scheme = "tcp"
	}
	v.mu.Lock()
	v.runCtx, v.scheme = ctx, scheme
	for _, e := range v.eps {
		v.start(e)
	}
	v.mu.Unlock()
	<-ctx.Done()
	// No goroutine starts once runCtx is gone, so none is added while
	// the wait below runs.
	v.mu.Lock()
	v.runCtx = nil
	v.mu.Unlock()
	v.running.Wait()
}

func (e *endpoint) run(ctx context.Context, scheme string) {
	backoff := zsub.Backoff{First: e.v.cfg.RetryInterval}
	for ctx.Err() == nil {
		start := time.Now()
		err := e.session(ctx, zmtpguard.Endpoint(scheme, e.cfg.Events))
		if ctx.Err() != nil {
			return
		}
		gen := e.disconnected(err)
		// A server that stays away stops counting: the router must not
		// send prompts to be fetched from an L2 node that is gone.
		time.AfterFunc(e.v.cfg.DropAfter, func() { e.drop(gen) })
		wait := backoff.Next(time.Since(start))
		e.log.Warn("l2 view: cache server stream lost; retrying", "err", err, "in", wait)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// disconnected records a lost connection and returns its generation.
func (e *endpoint) disconnected(err error) uint64 {
	e.v.mu.Lock()
	defer e.v.mu.Unlock()
	e.connected = false
	if err != nil {
		e.lastErr = err.Error()
	}
	return e.gen
}

// drop takes the endpoint's chunks out of the view if it is still
// disconnected from connection gen.
func (e *endpoint) drop(gen uint64) {
	e.v.mu.Lock()
	defer e.v.mu.Unlock()
	if e.connected || e.gen != gen || e.chunks == 0 {
		return
	}
	n := e.chunks
	e.v.clear(e, "")
	e.log.Warn("l2 view: cache server disconnected too long; its chunks no longer count", "chunks", n, "after", e.v.cfg.DropAfter)
}

type received struct {
	msg zmq4.Msg
	err error
}

// session follows one connection until it fails or ctx ends.
func (e *endpoint) session(ctx context.Context, guarded string) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sub, err := zsub.Dial(ctx, guarded, topicPrefix)
	if err != nil {
		return fmt.Errorf("%s: %w", e.cfg.Events, err)
	}
	defer sub.Close()
	msgs := make(chan received, recvBuffer)
	go func() {
		for {
			m, err := sub.Recv()
			select {
			case msgs <- received{m, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	e.v.mu.Lock()
	e.gen++
	e.connected, e.lastSeq = true, -1
	e.v.mu.Unlock()
	e.recv, e.floor = -1, -1
	e.log.Info("l2 view: connected to cache server", "snapshot", e.cfg.SnapshotURL)
	// Subscribed first, then the snapshots: batches after them wait in
	// msgs and apply on top.
	models := e.knownModels()
	if err := e.resync(ctx, models, ReasonConnect); err != nil {
		return err
	}
	for _, m := range models {
		if s := e.applied[m]; e.floor < 0 || s < e.floor {
			e.floor = s
		}
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-e.kick:
			if err := e.resync(ctx, e.newWanted(), ReasonNewModel); err != nil {
				return err
			}
		case r := <-msgs:
			if errors.Is(r.err, io.EOF) {
				return errors.New("cache server closed the connection")
			}
			if r.err != nil {
				return fmt.Errorf("receive: %w", r.err)
			}
			m, err := kvevents.ParseMessage(r.msg.Frames)
			if err != nil {
				e.countDecodeError()
				continue
			}
			if err := e.handle(ctx, m); err != nil {
				return err
			}
		}
	}
}

// knownModels are the models the endpoint followed plus those requests
// asked about.
func (e *endpoint) knownModels() []string {
	out := make([]string, 0, len(e.applied))
	for m := range e.applied {
		out = append(out, m)
	}
	return append(out, e.newWanted()...)
}

// newWanted are the models requests asked about that the endpoint does not
// follow yet.
func (e *endpoint) newWanted() []string {
	var out []string
	for _, m := range e.v.wantedModels() {
		if _, ok := e.applied[m]; !ok && len(e.applied)+len(out) < e.v.cfg.MaxModels {
			out = append(out, m)
		}
	}
	return out
}

func (e *endpoint) countDecodeError() {
	e.v.mu.Lock()
	e.decodeErrors++
	e.v.mu.Unlock()
}

// handle applies one message of the stream, resyncing first when the
// stream says what the view holds of this server may be wrong. An error
// (a snapshot failed) ends the connection: the next one resyncs.
func (e *endpoint) handle(ctx context.Context, m kvevents.Message) error {
	if m.Seq > math.MaxInt64 {
		e.countDecodeError()
		return nil
	}
	seq := int64(m.Seq)
	e.v.mu.Lock()
	e.lastSeq = seq
	e.v.mu.Unlock()
	prev := e.recv
	e.recv = seq
	switch {
	case prev >= 0 && seq <= prev:
		// The seq starts again at 0 in a new process: all we knew of this
		// server is of the old one.
		e.v.mu.Lock()
		e.v.clear(e, "")
		e.v.mu.Unlock()
		if err := e.resync(ctx, e.knownModels(), ReasonRestart); err != nil {
			return err
		}
	case prev >= 0 && seq > prev+1, prev < 0 && e.floor >= 0 && seq > e.floor+1:
		// A batch is lost (it may have named any model), or the
		// subscription took effect only after the snapshots were taken.
		if err := e.resync(ctx, e.knownModels(), ReasonGap); err != nil {
			return err
		}
	}
	model, ok := strings.CutPrefix(m.Topic, topicPrefix)
	if !ok || model == "" {
		e.countDecodeError()
		return nil
	}
	if _, known := e.applied[model]; !known {
		if len(e.applied) >= e.v.cfg.MaxModels {
			return nil
		}
		if err := e.resync(ctx, []string{model}, ReasonNewModel); err != nil {
			return err
		}
	}
	if seq <= e.applied[model] {
		return nil // in the snapshot already
	}
	b, err := kvevents.DecodeBatch(m.Payload)
	if err != nil {
		e.countDecodeError()
		return e.resync(ctx, []string{model}, ReasonGap)
	}
	e.applied[model] = seq
	if e.apply(model, b.Events) {
		// The server dropped changes and rebuilt its view: ours is
		// unreliable until the snapshot, which covers the rest of this
		// batch too (its seq is at least this one's).
		return e.resync(ctx, []string{model}, ReasonCleared)
	}
	return nil
}

// apply applies one batch's events to the endpoint's part of model, up to
// an AllBlocksCleared, which clears that part and reports true.
func (e *endpoint) apply(model string, evs []kvevents.Event) (cleared bool) {
	e.v.mu.Lock()
	defer e.v.mu.Unlock()
	e.events += uint64(len(evs))
	for _, ev := range evs {
		switch ev := ev.(type) {
		case kvevents.BlockStored:
			for _, h := range ev.BlockHashes {
				e.v.add(e, model, h.Uint64())
			}
		case kvevents.BlockRemoved:
			for _, h := range ev.BlockHashes {
				e.v.remove(e, model, h.Uint64())
			}
		case kvevents.AllBlocksCleared:
			e.v.clear(e, model)
			return true
		}
	}
	return false
}

// resync rebuilds the endpoint's part of each model from its snapshot.
func (e *endpoint) resync(ctx context.Context, models []string, reason string) error {
	if len(models) == 0 {
		return nil
	}
	e.v.mu.Lock()
	e.resyncs[reason]++
	e.v.mu.Unlock()
	for _, model := range models {
		s, err := e.v.fetchSnapshot(ctx, e.cfg.SnapshotURL, model)
		if err != nil {
			return fmt.Errorf("resync (%s) of %q: %w", reason, model, err)
		}
		e.v.mu.Lock()
		e.v.replace(e, model, s.keys)
		chunks := e.chunks
		e.v.mu.Unlock()
		e.applied[model] = s.seq
		e.log.Info("l2 view: resynced from snapshot", "reason", reason, "model", model, "seq", s.seq, "modelChunks", len(s.keys), "chunks", chunks)
	}
	return nil
}

// Health is one cache server's stream state, for /debug/endpoints.
type Health struct {
	Events       string            `json:"events"`
	Snapshot     string            `json:"snapshot"`
	Connected    bool              `json:"connected"`
	Chunks       int               `json:"chunks"`
	LastSeq      int64             `json:"lastSeq"`
	EventsTotal  uint64            `json:"eventsApplied"`
	DecodeErrors uint64            `json:"decodeErrors"`
	Resyncs      map[string]uint64 `json:"resyncs"`
	LastError    string            `json:"lastError,omitempty"`
}

// Health returns each cache server's state, in the order they joined.
func (v *View) Health() []Health {
	v.mu.RLock()
	defer v.mu.RUnlock()
	out := make([]Health, len(v.eps))
	for i, e := range v.eps {
		r := make(map[string]uint64, len(e.resyncs))
		for k, n := range e.resyncs {
			r[k] = n
		}
		out[i] = Health{Events: e.cfg.Events, Snapshot: e.cfg.SnapshotURL, Connected: e.connected, Chunks: e.chunks,
			LastSeq: e.lastSeq, EventsTotal: e.events, DecodeErrors: e.decodeErrors, Resyncs: r, LastError: e.lastErr}
	}
	return out
}
