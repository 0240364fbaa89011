// Package kvpublish turns the simulator's internal block events into vLLM's
// KV-cache event wire types and hands them to a publisher, choosing the
// hash form vLLM would send: by default the last 8 bytes of each digest as
// an unsigned integer; with VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0 the raw
// 32-byte digest.
package kvpublish

import (
	"encoding/binary"
	"time"

	"github.com/warmpath/warmpath/libs/blockhash"
	"github.com/warmpath/warmpath/libs/kvevents"
	"github.com/warmpath/warmpath/tools/vllmsim/kvblock"
)

// Publisher sends one batch; *kvzmq.Publisher implements it.
type Publisher interface {
	Publish(b kvevents.Batch) error
}

// Sink adapts a Publisher to the runtime's EventSink.
type Sink struct {
	Pub       Publisher
	IntHashes bool
	// Rank is the data-parallel rank written into every batch envelope.
	Rank int64
	// Now returns the batch timestamp; time.Now when nil.
	Now func() time.Time
}

// Publish converts events and publishes them as one batch.
func (s *Sink) Publish(events []kvblock.Event) error {
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	rank := s.Rank
	b := kvevents.Batch{
		TS:               float64(now().UnixNano()) / 1e9,
		Events:           Convert(events, s.IntHashes),
		DataParallelRank: &rank,
	}
	return s.Pub.Publish(b)
}

// WireHash returns the wire form of a block hash.
func WireHash(h blockhash.Hash, intHashes bool) kvevents.BlockHash {
	if intHashes {
		return kvevents.IntHash(binary.BigEndian.Uint64(h[len(h)-8:]))
	}
	return kvevents.BytesHash(h[:])
}

// Convert maps block events to wire events.
func Convert(events []kvblock.Event, intHashes bool) []kvevents.Event {
	out := make([]kvevents.Event, 0, len(events))
	hashes := func(hs []blockhash.Hash) []kvevents.BlockHash {
		w := make([]kvevents.BlockHash, len(hs))
		for i, h := range hs {
			w[i] = WireHash(h, intHashes)
		}
		return w
	}
	for _, ev := range events {
		switch ev.Kind {
		case kvblock.Stored:
			st := kvevents.BlockStored{
				BlockHashes: hashes(ev.Hashes),
				TokenIDs:    ev.Tokens,
				BlockSize:   ev.BlockSize,
				Medium:      ev.Medium,
			}
			if ev.Parent != nil {
				p := WireHash(*ev.Parent, intHashes)
				st.ParentBlockHash = &p
			}
			out = append(out, st)
		case kvblock.Removed:
			out = append(out, kvevents.BlockRemoved{BlockHashes: hashes(ev.Hashes), Medium: ev.Medium})
		case kvblock.Cleared:
			out = append(out, kvevents.AllBlocksCleared{})
		}
	}
	return out
}

// Batch wraps converted events in a batch, for consumers in the same
// process (the benchmark's discrete-event mode feeds the router's index).
func Batch(events []kvblock.Event, intHashes bool) kvevents.Batch {
	return kvevents.Batch{Events: Convert(events, intHashes)}
}
