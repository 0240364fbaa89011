package workload

import (
	"cmp"
	"encoding/binary"
	"hash/fnv"
	"slices"
)

// OracleHitRate is the fraction of prompt tokens an infinite prefix cache
// shared by the whole fleet would serve: requests in arrival order, each
// hitting the leading whole blocks (blockSize tokens, chained as vLLM
// chains block hashes) that any earlier request had, then adding its own.
// No router and no finite cache can do better. Chat requests count their
// messages' contents (the template's few tokens are left out).
func OracleHitRate(reqs []Request, blockSize int) float64 {
	if blockSize < 1 {
		blockSize = 16
	}
	order := make([]int, len(reqs))
	for i := range order {
		order[i] = i
	}
	// Stable: the rounds of one conversation share an Arrival and are in
	// index order.
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(reqs[a].Arrival, reqs[b].Arrival) })
	seen := map[uint64]struct{}{}
	var hits, total int
	buf := make([]byte, 8+4*blockSize)
	for _, i := range order {
		toks := reqs[i].Tokens()
		total += len(toks)
		var parent uint64
		hitting := true
		for b := 0; b+blockSize <= len(toks); b += blockSize {
			binary.LittleEndian.PutUint64(buf, parent)
			for j, t := range toks[b : b+blockSize] {
				binary.LittleEndian.PutUint32(buf[8+4*j:], t)
			}
			h := fnv.New64a()
			_, _ = h.Write(buf)
			parent = h.Sum64()
			if _, ok := seen[parent]; ok && hitting {
				hits += blockSize
				continue
			}
			hitting = false
			seen[parent] = struct{}{}
		}
	}
	if total == 0 {
		return 0
	}
	return float64(hits) / float64(total)
}
