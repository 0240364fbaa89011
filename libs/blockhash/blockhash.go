// Package blockhash computes the chained content hashes that identify KV
// blocks, the way vLLM's `sha256_cbor` prefix-caching hash does: each block's
// hash is SHA-256 over the canonical CBOR encoding of
// [parent hash, token ids, extra keys], and the first block's parent is a
// per-process NONE_HASH derived from PYTHONHASHSEED (or random without it).
//
// Because the chain starts from NONE_HASH, two engines only agree on hashes
// when they share the seed — exactly vLLM's behaviour, which is why the
// router keys blocks by token ids instead of reproducing these hashes.
package blockhash

import (
	"crypto/rand"
	"crypto/sha256"
	"fmt"

	"github.com/fxamacker/cbor/v2"
)

// Size is the length of a hash in bytes.
const Size = sha256.Size

// Hash is one block's content hash.
type Hash [Size]byte

// Hasher chains block hashes from a NONE_HASH root. It is safe for
// concurrent use.
type Hasher struct {
	none Hash
	enc  cbor.EncMode
}

// New returns a Hasher whose root derives from seed the way vLLM derives
// NONE_HASH from PYTHONHASHSEED; an empty seed gives a random root, so hashes
// differ between processes (vLLM's behaviour without PYTHONHASHSEED).
func New(seed string) (*Hasher, error) {
	enc, err := cbor.CoreDetEncOptions().EncMode()
	if err != nil {
		return nil, fmt.Errorf("blockhash: cbor mode: %w", err)
	}
	h := &Hasher{enc: enc}
	if seed == "" {
		if _, err := rand.Read(h.none[:]); err != nil {
			return nil, fmt.Errorf("blockhash: random root: %w", err)
		}
		return h, nil
	}
	b, err := enc.Marshal(seed)
	if err != nil {
		return nil, fmt.Errorf("blockhash: encode seed: %w", err)
	}
	h.none = sha256.Sum256(b)
	return h, nil
}

// None returns the chain root used as the parent of a sequence's first block.
func (h *Hasher) None() Hash { return h.none }

// Block returns the hash of a block of tokens whose parent block hashed to
// parent. extra carries what else distinguishes the block (LoRA name,
// cache_salt on the first block); nil when nothing does.
func (h *Hasher) Block(parent Hash, tokens []uint32, extra []string) Hash {
	var ex any
	if len(extra) > 0 {
		ex = extra
	}
	b, err := h.enc.Marshal([]any{parent[:], tokens, ex})
	if err != nil {
		// Encoding byte slices, uint32 slices and strings cannot fail.
		panic(fmt.Sprintf("blockhash: cbor encode: %v", err))
	}
	return sha256.Sum256(b)
}

// Chain returns the hashes of every full block of tokens, blockSize tokens
// each, starting from the root. extra applies to the first block only
// (vLLM attaches cache_salt there).
func (h *Hasher) Chain(tokens []uint32, blockSize int, extra []string) []Hash {
	n := len(tokens) / blockSize
	out := make([]Hash, 0, n)
	parent := h.none
	for i := range n {
		var ex []string
		if i == 0 {
			ex = extra
		}
		parent = h.Block(parent, tokens[i*blockSize:(i+1)*blockSize], ex)
		out = append(out, parent)
	}
	return out
}
