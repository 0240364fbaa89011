// Command eventproxy stands between the router and one simulated worker in
// tests/faults, under the worker's host name: it forwards the worker's
// HTTP and replay ports as plain TCP and relays its KV-event stream (a ZMQ
// SUB socket on the worker's PUB, a PUB socket for the router), dropping or
// swapping whole messages when the test asks it to over its control port.
// It is a fault injector for the suite, not part of warmpath.
//
// Control (HTTP): POST /mode?drop_every=N&swap=1 sets the mode (N=0 and no
// swap: relay everything in order); GET /stats gives what was relayed,
// dropped and swapped; GET /health answers 200.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-zeromq/zmq4"
)

func main() {
	forward := flag.String("forward", "", "ports forwarded as plain TCP, comma-separated listen=target pairs, e.g. 0.0.0.0:8000=sim-a-real:8000")
	eventsListen := flag.String("events-listen", "tcp://0.0.0.0:8001", "the PUB endpoint the router dials")
	eventsUpstream := flag.String("events-upstream", "", "the worker's PUB endpoint, e.g. tcp://sim-a-real:8001")
	control := flag.String("control", "0.0.0.0:9000", "the control HTTP address")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, log, *forward, *eventsListen, *eventsUpstream, *control)
	stop()
	if err != nil {
		log.Error("eventproxy", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, log *slog.Logger, forward, eventsListen, eventsUpstream, control string) error {
	if eventsUpstream == "" {
		return errors.New("--events-upstream is required")
	}
	for pair := range strings.SplitSeq(forward, ",") {
		if pair == "" {
			continue
		}
		listen, target, ok := strings.Cut(pair, "=")
		if !ok {
			return fmt.Errorf("--forward %q: want listen=target", pair)
		}
		var lc net.ListenConfig
		ln, err := lc.Listen(ctx, "tcp", listen)
		if err != nil {
			return err
		}
		go forwardTCP(ctx, log, ln, target)
	}
	pub := zmq4.NewPub(ctx)
	defer pub.Close()
	if err := pub.Listen(eventsListen); err != nil {
		return fmt.Errorf("listen %s: %w", eventsListen, err)
	}
	r := &relay{pub: pub}
	go r.run(ctx, log, eventsUpstream)

	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(r.stats())
	})
	mux.HandleFunc("POST /mode", func(w http.ResponseWriter, req *http.Request) {
		q := req.URL.Query()
		n, swap := 0, q.Get("swap") == "1"
		if s := q.Get("drop_every"); s != "" {
			var err error
			if n, err = strconv.Atoi(s); err != nil || n < 0 {
				http.Error(w, "drop_every: want a count ≥ 0", http.StatusBadRequest)
				return
			}
		}
		r.setMode(n, swap)
		log.Info("mode", "drop_every", n, "swap", swap)
	})
	srv := &http.Server{Addr: control, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// relay passes the worker's messages to the PUB socket, whole, in the mode
// set last.
type relay struct {
	pub zmq4.Socket

	mu        sync.Mutex // guards everything below and sends on pub
	dropEvery int
	swap      bool
	held      *zmq4.Msg  // in swap mode, the message waiting for its successor
	counts    relayStats // what happened to the messages received
}

type relayStats struct {
	Received uint64 `json:"received"`
	Relayed  uint64 `json:"relayed"`
	Dropped  uint64 `json:"dropped"`
	Swapped  uint64 `json:"swapped"`
}

func (r *relay) stats() relayStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.counts
}

// setMode changes the mode; a message held for a swap goes out first.
func (r *relay) setMode(dropEvery int, swap bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.dropEvery, r.swap = dropEvery, swap
	if !swap && r.held != nil {
		r.send(*r.held)
		r.held = nil
	}
}

// send publishes m; holds r.mu.
func (r *relay) send(m zmq4.Msg) {
	if err := r.pub.Send(m); err == nil {
		r.counts.Relayed++
	}
}

// handle applies the mode to one message from the worker.
func (r *relay) handle(m zmq4.Msg) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.counts.Received++
	switch {
	case r.dropEvery > 0 && r.counts.Received%uint64(r.dropEvery) == 0:
		r.counts.Dropped++
	case r.swap && r.held == nil:
		r.held = &m
	case r.swap:
		r.send(m)
		r.send(*r.held)
		r.held = nil
		r.counts.Swapped++
	default:
		r.send(m)
	}
}

// run subscribes to the worker and relays until ctx ends, dialing again
// after a failure.
func (r *relay) run(ctx context.Context, log *slog.Logger, upstream string) {
	for ctx.Err() == nil {
		sub := zmq4.NewSub(ctx, zmq4.WithDialerTimeout(2*time.Second))
		err := sub.SetOption(zmq4.OptionSubscribe, "")
		if err == nil {
			err = sub.Dial(upstream)
		}
		for err == nil {
			var m zmq4.Msg
			if m, err = sub.Recv(); err == nil {
				r.handle(m)
			}
		}
		_ = sub.Close()
		if ctx.Err() == nil {
			log.Warn("upstream", "endpoint", upstream, "err", err)
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// forwardTCP accepts on ln and joins each connection to target until ctx
// ends.
func forwardTCP(ctx context.Context, log *slog.Logger, ln net.Listener, target string) {
	go func() {
		<-ctx.Done()
		_ = ln.Close()
	}()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			d := net.Dialer{Timeout: 5 * time.Second}
			up, err := d.DialContext(ctx, "tcp", target)
			if err != nil {
				log.Warn("forward", "target", target, "err", err)
				return
			}
			defer up.Close()
			done := make(chan struct{}, 2)
			go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
			go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
			<-done // either side ended: end both
		}()
	}
}
