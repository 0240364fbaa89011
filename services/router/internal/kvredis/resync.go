package kvredis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/warmpath/warmpath/services/router/kvindex"
)

// errSuperseded says another replica's resync of the worker took over.
var errSuperseded = errors.New("another replica is resyncing the worker")

// collect removes worker's dead entries from both its parts.
func (s *Store) collect(worker string) error {
	for _, p := range s.parts(worker) {
		if err := s.collectPart(worker, p); err != nil {
			return err
		}
	}
	return nil
}

// collectPart removes worker's dead entries in part p chunk by chunk:
// SSCAN returns about ChunkSize keys of its set per call, and one short
// script cleans them, so other clients' commands run between chunks.
func (s *Store) collectPart(worker string, p part) error {
	var cursor uint64
	for {
		var chunk []string
		err := s.g.do(opCollect, 4, func(ctx context.Context) error {
			var err error
			chunk, cursor, err = s.rdb.SScan(ctx, p.keys[2], cursor, "", int64(s.chunk)).Result()
			if err != nil || len(chunk) == 0 {
				return err
			}
			args := make([]any, 0, 2+len(chunk))
			args = append(args, p.bprefix, p.field)
			for _, k := range chunk {
				args = append(args, k)
			}
			return collectScript.Run(ctx, s.rdb, p.keys, args...).Err()
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
// and applying c alone would leave their blocks missing or stale. In each
// of the worker's parts, its entries die at once (a new generation), the
// dead ones are collected, and the live ones written in chunks. A batch
// another replica applies meanwhile is added on top (copies are counted,
// so the order does not matter). The worker stays dirty (its lookups
// local) until each part's resync completes or is left to another
// replica: one that applied a later batch, or started its own resync,
// since then. Every replica commits every batch in order, so a batch
// missing from Redis failed on all of them, and each is dirty and
// resyncing; leaving it to the other (rather than bumping again) keeps
// two replicas from undoing each other's rewrite forever.
func (s *Store) resync(c *kvindex.Change) error {
	held := s.local.Holdings(c.Worker)
	for i, p := range s.parts(c.Worker) {
		if err := s.resyncPart(c, p, held); err != nil {
			return fmt.Errorf("kvredis: resync %s at seq %d: %w", c.Worker, c.Seq, err)
		}
		s.setMarked(c.Worker, i, true) // claimed, or another replica's later one found
	}
	s.setFlag(s.dirty, c.Worker, false)
	s.setFlag(s.dead, c.Worker, false)
	return nil
}

// resyncPart rewrites part p of c's worker with the holdings in its tiers.
func (s *Store) resyncPart(c *kvindex.Change, p part, held []kvindex.Holding) error {
	var gens []any
	err := s.g.do(opResync, 4, func(ctx context.Context) error {
		var err error
		gens, err = resyncScript.Run(ctx, s.rdb, p.keys, mark(c), boolArg(c.Reset)).Slice()
		return err
	})
	if err != nil {
		return err
	}
	if len(gens) != int(kvindex.NumTiers) {
		// another replica applied a later batch: this view is behind, and
		// that replica is either complete or resyncing itself
		return nil
	}
	if err := s.collectPart(c.Worker, p); err != nil {
		s.setFlag(s.dead, c.Worker, true)
		return err
	}
	mine := slices.DeleteFunc(slices.Clone(held), func(h kvindex.Holding) bool { return !p.holds(h.Tier) })
	for len(mine) > 0 {
		n := min(len(mine), s.chunk)
		if err := s.load(p, c.Worker, gens, mine[:n]); err != nil {
			if errors.Is(err, errSuperseded) {
				return nil // the other replica writes its view
			}
			return err
		}
		mine = mine[n:]
	}
	return nil
}

// load writes one chunk of worker's holdings in part p, in generations
// gens.
func (s *Store) load(p part, worker string, gens []any, chunk []kvindex.Holding) error {
	args := make([]any, 0, 6+3*len(chunk))
	args = append(args, p.bprefix, p.field, int(s.ttl.Seconds()))
	args = append(args, gens...)
	for _, h := range chunk {
		args = append(args, strconv.FormatUint(h.Key, 16), int(h.Tier), h.Copies)
	}
	var ok int64
	err := s.g.do(opResync, 4, func(ctx context.Context) error {
		var err error
		ok, err = loadScript.Run(ctx, s.rdb, p.keys, args...).Int64()
		return err
	})
	if err != nil {
		return fmt.Errorf("load %s: %w", worker, err)
	}
	if ok == 0 {
		return errSuperseded
	}
	return nil
}
