// Package hrw is rendezvous (highest-random-weight) hashing (Thaler &
// Ravishankar, "Using name-based mappings to increase hit rates", 1998):
// the owner of a key among a set of ids is the id with the largest
// weight, so adding or removing one of N ids moves only ~1/N of the keys,
// and every process that knows the same ids agrees on the owner without
// talking to the others.
package hrw

import "github.com/cespare/xxhash/v2"

// Weight is id's weight for key.
func Weight(key uint64, id string) uint64 {
	return mix64(key ^ xxhash.Sum64String(id))
}

// Owner is the index in ids of key's owner; -1 when ids is empty. Equal
// weights go to the larger id, so the answer does not depend on order.
func Owner(key uint64, ids []string) int {
	best, bestW := -1, uint64(0)
	for i, id := range ids {
		w := Weight(key, id)
		if best < 0 || w > bestW || (w == bestW && id > ids[best]) {
			best, bestW = i, w
		}
	}
	return best
}

// mix64 is the splitmix64 finalizer: it spreads every input bit over the
// output, so XOR-combined hashes still rank uniformly.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
