package kvredis

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/warmpath/warmpath/services/router/kvindex"
)

// errSuperseded says another replica's resync of the worker took over.
var errSuperseded = errors.New("another replica is resyncing the worker")

// collect removes worker's dead entries chunk by chunk: SSCAN returns
// about ChunkSize keys of its set per call, and one short script cleans
// them, so other clients' commands run between chunks.
func (s *Store) collect(worker string) error {
	keys := s.keys(worker)
	var cursor uint64
	for {
		var chunk []string
		err := s.g.do(opCollect, 4, func(ctx context.Context) error {
			var err error
			chunk, cursor, err = s.rdb.SScan(ctx, keys[2], cursor, "", int64(s.chunk)).Result()
			if err != nil || len(chunk) == 0 {
				return err
			}
			args := make([]any, 0, 2+len(chunk))
			args = append(args, s.prefix+"b:", worker)
			for _, k := range chunk {
				args = append(args, k)
			}
			return collectScript.Run(ctx, s.rdb, keys, args...).Err()
		})
		if err != nil {
			return fmt.Errorf("kvredis: collect %s: %w", worker, err)
		}
		if cursor == 0 {
			return nil
		}
	}
}

// resync rewrites worker in Redis from this replica's own index, which c
// was just applied to: some of its earlier batches never reached Redis,
// and applying c alone would leave their blocks missing or stale. The
// worker's entries die at once (a new generation), the dead ones are
// collected, and the live ones written in chunks. A batch another replica
// applies meanwhile is added on top (copies are counted, so the order
// does not matter). The worker stays dirty (its lookups local) until a
// resync completes or is left to another replica: one that applied a
// later batch, or started its own resync, since then. Every replica
// commits every batch in order, so a batch missing from Redis failed on
// all of them, and each is dirty and resyncing; leaving it to the other
// (rather than bumping again) keeps two replicas from undoing each
// other's rewrite forever.
func (s *Store) resync(c *kvindex.Change) error {
	keys := s.keys(c.Worker)
	var gens []any
	err := s.g.do(opResync, 4, func(ctx context.Context) error {
		var err error
		gens, err = resyncScript.Run(ctx, s.rdb, keys, mark(c), boolArg(c.Reset)).Slice()
		return err
	})
	if err != nil {
		return fmt.Errorf("kvredis: resync %s at seq %d: %w", c.Worker, c.Seq, err)
	}
	if len(gens) != int(kvindex.NumTiers) {
		// another replica applied a later batch: this view is behind, and
		// that replica is either complete or resyncing itself
		s.setFlag(s.dirty, c.Worker, false)
		return nil
	}
	if err := s.collect(c.Worker); err != nil {
		s.setFlag(s.dead, c.Worker, true)
		return fmt.Errorf("kvredis: resync %s at seq %d: %w", c.Worker, c.Seq, err)
	}
	held := s.local.Holdings(c.Worker)
	for len(held) > 0 {
		n := min(len(held), s.chunk)
		if err := s.load(c.Worker, gens, held[:n]); err != nil {
			if errors.Is(err, errSuperseded) {
				s.setFlag(s.dirty, c.Worker, false) // the other replica writes its view
				return nil
			}
			return fmt.Errorf("kvredis: resync %s at seq %d: %w", c.Worker, c.Seq, err)
		}
		held = held[n:]
	}
	s.setFlag(s.dirty, c.Worker, false)
	s.setFlag(s.dead, c.Worker, false)
	return nil
}

// load writes one chunk of worker's holdings in generations gens.
func (s *Store) load(worker string, gens []any, chunk []kvindex.Holding) error {
	args := make([]any, 0, 6+3*len(chunk))
	args = append(args, s.prefix+"b:", worker, int(s.ttl.Seconds()))
	args = append(args, gens...)
	for _, h := range chunk {
		args = append(args, strconv.FormatUint(h.Key, 16), int(h.Tier), h.Copies)
	}
	var ok int64
	err := s.g.do(opResync, 4, func(ctx context.Context) error {
		var err error
		ok, err = loadScript.Run(ctx, s.rdb, s.keys(worker), args...).Int64()
		return err
	})
	if err != nil {
		return err
	}
	if ok == 0 {
		return errSuperseded
	}
	return nil
}
