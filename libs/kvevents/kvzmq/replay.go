package kvzmq

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/warmpath/warmpath/libs/kvevents"
)

// Replay protocol (vLLM's replay ROUTER socket): a DEALER sends
// ["", start_seq as 8 bytes big-endian]; the ROUTER answers every buffered
// batch with seq >= start_seq as ["", topic, seq, payload] (vLLM before v0.26,
// vllm-project/vllm#45177, omits topic) and then an end marker with seq
// EndSeq and an empty payload. A start already evicted is not an error: the
// first seq returned is simply larger than the one asked for.

// serveReplays answers replay requests until the publisher closes. Receive
// errors (a client that went away) do not stop it.
func (p *Publisher) serveReplays() {
	defer close(p.replayDone)
	defer p.recoverPanic("replay")
	for {
		msg, err := p.router.Recv()
		if err != nil {
			if p.ctx.Err() != nil {
				return
			}
			p.log.Debug("kvzmq: replay receive", "err", err)
			select {
			case <-p.ctx.Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		p.serveReplay(msg.Frames)
	}
}

// serveReplay answers one request [identity, "", start_seq].
func (p *Publisher) serveReplay(frames [][]byte) {
	if len(frames) != 3 || len(frames[1]) != 0 || len(frames[2]) != 8 {
		p.log.Warn("kvzmq: invalid replay request", "frames", len(frames))
		return
	}
	p.replays.Add(1)
	id := frames[0]
	start := binary.BigEndian.Uint64(frames[2])
	p.mu.Lock()
	msgs := p.buf.since(start)
	p.mu.Unlock()
	for _, m := range msgs {
		seq := binary.BigEndian.AppendUint64(nil, m.Seq)
		if err := p.router.SendMulti(zmq4.NewMsgFrom(id, []byte{}, []byte(m.Topic), seq, m.Payload)); err != nil {
			// The client went away; nothing to repair.
			p.log.Debug("kvzmq: replay send", "err", err)
			return
		}
	}
	// The end marker carries the configured topic, as it always has.
	end := binary.BigEndian.AppendUint64(nil, kvevents.EndSeq)
	if err := p.router.SendMulti(zmq4.NewMsgFrom(id, []byte{}, []byte(p.topic), end, []byte{})); err != nil {
		// zmq4 writes an empty frame's body separately; a client that
		// already has the header may have hung up.
		p.log.Debug("kvzmq: replay send end marker", "err", err)
	}
}

// Replay asks the replay socket at endpoint for every buffered batch with
// seq >= startSeq and returns them in order, without the end marker. A nil
// error means the end marker arrived. On error (ctx done, connection lost,
// malformed reply) it returns the messages received so far with the error.
// Compare the first Seq with startSeq to detect batches already evicted.
func Replay(ctx context.Context, endpoint string, startSeq uint64) ([]kvevents.Message, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	d := zmq4.NewDealer(ctx, zmq4.WithLogger(log.New(io.Discard, "", 0)))
	defer d.Close()

	// zmq4's handshake ignores ctx, so dial aside and stop waiting on ctx.
	dialed := make(chan error, 1)
	go func() {
		defer func() {
			if v := recover(); v != nil {
				dialed <- fmt.Errorf("dial panicked: %v", v)
			}
		}()
		dialed <- d.Dial(guarded(endpoint))
	}()
	select {
	case err := <-dialed:
		if err != nil {
			return nil, fmt.Errorf("kvzmq: replay %s: %w", endpoint, err)
		}
	case <-ctx.Done():
		return nil, fmt.Errorf("kvzmq: replay %s: %w", endpoint, ctx.Err())
	}

	req := zmq4.NewMsgFrom([]byte{}, binary.BigEndian.AppendUint64(nil, startSeq))
	if err := d.SendMulti(req); err != nil {
		return nil, fmt.Errorf("kvzmq: replay %s: send request: %w", endpoint, err)
	}
	var out []kvevents.Message
	for {
		msg, err := d.Recv()
		if err != nil {
			if ctx.Err() != nil {
				err = ctx.Err()
			}
			return out, fmt.Errorf("kvzmq: replay %s: %w", endpoint, err)
		}
		m, end, err := kvevents.ParseReplayReply(msg.Frames)
		if err != nil {
			return out, fmt.Errorf("kvzmq: replay %s: %w", endpoint, err)
		}
		if end {
			return out, nil
		}
		out = append(out, m)
	}
}
