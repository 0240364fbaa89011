package kvredis

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/warmpath/warmpath/services/router/kvindex"
)

// maxRounds bounds the round trips of one lookup. A worker's match in the
// shared L2 can run through blocks only the L2 part holds and on through
// blocks only the worker's own part holds, and each part is read down to
// its first gap: a chain that alternates more often than this is cut
// short (matching less, never more).
const maxRounds = 4

// unknown marks a block whose tiers a part has not been asked for yet.
const unknown = 0xff

// read asks part src, from block from on, which tiers hold each block.
type read struct{ src, from int }

// LookupShared is Lookup from Redis alone. Its error wraps ErrUnavailable
// (Redis failed, or the breaker refused the call at once); out then
// matches nothing.
//
// Every part is read by one script (its keys share a slot), all in one
// pipeline per round, which a cluster client splits by node and sends in
// parallel: the first round reads each worker's own part and the L2 part
// down to their first gap, which settles most lookups; a further round
// reads only the parts a worker's L2 chain still needs.
func (s *Store) LookupShared(keys []uint64, workers []string, out []kvindex.Match) ([]kvindex.Match, error) {
	out = out[:0]
	for range workers {
		out = append(out, kvindex.Match{})
	}
	if len(keys) == 0 {
		return out, nil
	}
	hex := make([]any, len(keys))
	for i, k := range keys {
		hex[i] = strconv.FormatUint(k, 16)
	}
	// bits[i] is worker i's own part, bits[len(workers)] the L2 part.
	parts := make([]part, len(workers)+1)
	bits := make([][]uint8, len(workers)+1)
	reads := make([]read, 0, len(parts))
	for i := range parts {
		if i < len(workers) {
			parts[i] = s.own(workers[i])
		} else {
			parts[i] = s.shared("")
		}
		bits[i] = make([]uint8, len(keys))
		for n := range bits[i] {
			bits[i][n] = unknown
		}
		reads = append(reads, read{src: i})
	}
	err := s.g.do(opLookup, 1, func(ctx context.Context) error {
		for round := 0; len(reads) > 0 && round < maxRounds; round++ {
			if err := s.readParts(ctx, parts, hex, reads, bits); err != nil {
				return err
			}
			reads = reads[:0]
			for i := range workers {
				reads = match(i, len(workers), bits, &out[i], reads)
			}
		}
		return nil
	})
	if err != nil {
		clear(out)
		return out, fmt.Errorf("kvredis: lookup: %w", err)
	}
	return out, nil
}

// readParts runs reads in one pipeline and records what each part holds.
func (s *Store) readParts(ctx context.Context, parts []part, hex []any, reads []read, bits [][]uint8) error {
	run := func(eval func(ctx context.Context, c redis.Scripter, keys []string, args ...any) *redis.Cmd) ([]*redis.Cmd, error) {
		pipe := s.rdb.Pipeline()
		cmds := make([]*redis.Cmd, len(reads))
		for i, r := range reads {
			p := parts[r.src]
			args := make([]any, 0, 1+len(hex)-r.from)
			args = append(args, p.bprefix)
			args = append(args, hex[r.from:]...)
			cmds[i] = eval(ctx, pipe, []string{p.gprefix}, args...)
		}
		_, err := pipe.Exec(ctx)
		return cmds, err
	}
	cmds, err := run(lookupScript.EvalSha)
	if err != nil && noScript(cmds) {
		// a node restarted (or failed over) with an empty script cache:
		// EVAL sends the source, and caches it there again
		cmds, err = run(lookupScript.Eval)
	}
	if err != nil {
		return err
	}
	for i, r := range reads {
		got, err := cmds[i].Text()
		if err != nil {
			return err
		}
		if len(got) > len(hex)-r.from {
			return fmt.Errorf("part read %d blocks of %d", len(got), len(hex)-r.from)
		}
		for j := range len(got) {
			bits[r.src][r.from+j] = got[j] - '0'
		}
	}
	return nil
}

func noScript(cmds []*redis.Cmd) bool {
	for _, c := range cmds {
		if c != nil && redis.HasErrorPrefix(c.Err(), "NOSCRIPT") {
			return true
		}
	}
	return false
}

// match sets m to worker i's chains over its own part's bits (bits[i])
// and the L2 part's (bits[l2]). When the L2 chain reaches a block one of
// the two has not been read at, it appends where to read on to reads,
// once per part, from the earliest block.
func match(i, l2 int, bits [][]uint8, m *kvindex.Match, reads []read) []read {
	*m = kvindex.Match{}
	own, shared := bits[i], bits[l2]
	gpu, local := true, true
	for n := range own {
		b, a := own[n], shared[n]
		if b == unknown {
			// read down to its first gap already: GPU and CPU chains ended
			gpu, local = false, false
		}
		if gpu = gpu && b&(1<<kvindex.GPU) != 0; gpu {
			m.GPU = n + 1
		}
		if local = local && b&(1<<kvindex.GPU|1<<kvindex.CPU) != 0; local {
			m.Local = n + 1
		}
		if (b != unknown && b != 0) || (a != unknown && a != 0) {
			m.Any = n + 1
			continue
		}
		if b == unknown {
			reads = addRead(reads, read{src: i, from: n})
		}
		if a == unknown {
			reads = addRead(reads, read{src: l2, from: n})
		}
		return reads
	}
	return reads
}

func addRead(reads []read, r read) []read {
	for j := range reads {
		if reads[j].src == r.src {
			reads[j].from = min(reads[j].from, r.from)
			return reads
		}
	}
	return append(reads, r)
}
