// Package runtime drives the simulator's engine core in (scaled) real time:
// one goroutine steps the engine, sleeps each step's modelled duration
// divided by the time scale, then hands the step's tokens to the waiting
// HTTP handlers and its KV-cache events to the publisher.
//
// Engine time ("sim seconds") advances by step durations while busy and by
// scaled wall time while idle, so every latency the simulator reports is
// what the modelled GPU would have taken, whatever the time scale and
// however slow this machine's goroutine scheduling is.
package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	"github.com/warmpath/warmpath/tools/vllmsim/engine"
	"github.com/warmpath/warmpath/tools/vllmsim/kvblock"
)

// EventSink receives each step's KV-cache events (GPU pool first, then
// LMCache L1), in order. Publish must not block for long.
type EventSink interface {
	Publish(events []kvblock.Event) error
}

// EventSource yields events produced outside the engine (LMCache L1).
type EventSource interface {
	TakeEvents() []kvblock.Event
}

// StepObserver sees every completed step (metrics). It is called with the
// engine locked and must be quick.
type StepObserver interface {
	ObserveStep(res engine.StepResult)
}

// Config wires a Runtime.
type Config struct {
	Engine *engine.Engine
	// TimeScale > 1 runs faster than real time; 1 is real time.
	TimeScale float64
	// MaxWaiting bounds queued requests (memory); Submit refuses more with
	// ErrOverloaded. 0 means 10000.
	MaxWaiting int
	// Optional parts.
	Events   EventSink
	L1Events EventSource
	Observer StepObserver
	Log      *slog.Logger
}

// Token is one generated token delivered to a request's stream.
type Token struct {
	ID    uint32
	First bool
	// Final is set on the last token; Stats is then complete.
	Final bool
	Stats engine.Stats
}

// Runtime owns the engine. It is safe for concurrent use.
type Runtime struct {
	cfg  Config
	wake chan struct{}

	mu sync.Mutex // guards everything below and the engine
	// clock is engine time in sim seconds.
	clock     float64
	idleSince time.Time
	streams   map[string]chan Token
}

// ErrOverloaded is returned by Submit when MaxWaiting requests are queued.
var ErrOverloaded = errors.New("runtime: too many queued requests")

// New returns a runtime; call Run to start stepping.
func New(cfg Config) (*Runtime, error) {
	if cfg.Engine == nil {
		return nil, errors.New("runtime: nil engine")
	}
	if cfg.TimeScale <= 0 {
		return nil, fmt.Errorf("runtime: time scale must be positive, got %v", cfg.TimeScale)
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxWaiting == 0 {
		cfg.MaxWaiting = 10000
	}
	return &Runtime{
		cfg:       cfg,
		wake:      make(chan struct{}, 1),
		idleSince: time.Now(),
		streams:   make(map[string]chan Token),
	}, nil
}

// Submit queues r and returns the channel its tokens arrive on; the channel
// is closed after the final token or when the request is aborted. The
// engine takes ownership of r.
func (rt *Runtime) Submit(r *engine.Request) (<-chan Token, error) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.cfg.Engine.NumWaiting() >= rt.cfg.MaxWaiting {
		return nil, fmt.Errorf("%w (%d)", ErrOverloaded, rt.cfg.MaxWaiting)
	}
	rt.catchUpIdle()
	r.Arrival = rt.clock
	if err := rt.cfg.Engine.Add(r); err != nil {
		return nil, err
	}
	ch := make(chan Token, r.MaxTokens+1)
	rt.streams[r.ID] = ch
	select {
	case rt.wake <- struct{}{}:
	default:
	}
	return ch, nil
}

// Abort cancels a request (its client went away) and frees its KV blocks.
func (rt *Runtime) Abort(id string) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.cfg.Engine.Abort(id)
	if ch, ok := rt.streams[id]; ok {
		close(ch)
		delete(rt.streams, id)
	}
}

// catchUpIdle advances the clock over an idle period; holds rt.mu.
func (rt *Runtime) catchUpIdle() {
	if rt.cfg.Engine.HasWork() {
		return
	}
	now := time.Now()
	rt.clock += now.Sub(rt.idleSince).Seconds() * rt.cfg.TimeScale
	rt.idleSince = now
}

// With runs f with the engine locked, for reads such as metrics.
func (rt *Runtime) With(f func(e *engine.Engine, clock float64)) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	f(rt.cfg.Engine, rt.clock)
}

// SetObserver sets the step observer; call it before Run.
func (rt *Runtime) SetObserver(o StepObserver) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.cfg.Observer = o
}

// ResetPrefixCache clears the GPU prefix cache if no request holds blocks.
func (rt *Runtime) ResetPrefixCache() bool {
	rt.mu.Lock()
	ok := rt.cfg.Engine.ResetPrefixCache()
	rt.mu.Unlock()
	if ok {
		rt.wakeUp()
	}
	return ok
}

func (rt *Runtime) wakeUp() {
	select {
	case rt.wake <- struct{}{}:
	default:
	}
}

// Run steps the engine until ctx ends. Panics in a step are logged and end
// Run with an error, since engine state is then unknown.
func (rt *Runtime) Run(ctx context.Context) (err error) {
	defer func() {
		if p := recover(); p != nil {
			rt.cfg.Log.Error("engine loop panicked", "panic", p, "stack", string(debug.Stack()))
			err = fmt.Errorf("runtime: engine loop panicked: %v", p)
		}
	}()
	timer := time.NewTimer(0)
	<-timer.C
	for {
		rt.mu.Lock()
		if !rt.cfg.Engine.HasWork() {
			events := rt.takeL1Events(nil)
			rt.mu.Unlock()
			rt.publish(events) // e.g. AllBlocksCleared after a reset
			select {
			case <-ctx.Done():
				return nil
			case <-rt.wake:
				continue
			}
		}
		start := rt.clock
		began := time.Now()
		res := rt.cfg.Engine.Step(start)
		res.Events = rt.takeL1Events(res.Events)
		rt.mu.Unlock()

		rt.publish(res.Events)
		if res.Duration > 0 {
			// The step's own wall time (an L2 fetch is real I/O, and it is
			// already in Duration) comes off the wait.
			timer.Reset(time.Duration(res.Duration/rt.cfg.TimeScale*float64(time.Second)) - time.Since(began))
			select {
			case <-ctx.Done():
				timer.Stop()
				return nil
			case <-timer.C:
			}
		}

		rt.mu.Lock()
		rt.clock = start + res.Duration
		rt.deliver(res.Outputs)
		if !rt.cfg.Engine.HasWork() {
			rt.idleSince = time.Now()
		}
		// Under the lock: outputs point at requests the engine mutates.
		if rt.cfg.Observer != nil {
			rt.cfg.Observer.ObserveStep(res)
		}
		rt.mu.Unlock()
	}
}

func (rt *Runtime) takeL1Events(events []kvblock.Event) []kvblock.Event {
	if rt.cfg.L1Events != nil {
		events = append(events, rt.cfg.L1Events.TakeEvents()...)
	}
	return events
}

func (rt *Runtime) publish(events []kvblock.Event) {
	if rt.cfg.Events == nil || len(events) == 0 {
		return
	}
	if err := rt.cfg.Events.Publish(events); err != nil {
		rt.cfg.Log.Warn("publish KV events", "err", err, "events", len(events))
	}
}

// deliver hands tokens to their streams; holds rt.mu. Channels are sized
// for every token of their request, so sends never block.
func (rt *Runtime) deliver(outs []engine.Output) {
	for _, o := range outs {
		ch, ok := rt.streams[o.Request.ID]
		if !ok || !o.HasToken {
			continue // aborted meanwhile
		}
		ch <- Token{ID: o.Token, First: o.First, Final: o.Finished, Stats: o.Request.Stats}
		if o.Finished {
			close(ch)
			delete(rt.streams, o.Request.ID)
		}
	}
}
