package kvindex

import (
	"encoding/binary"

	"github.com/cespare/xxhash/v2"
)

// Seed is the chain's start for a model and LoRA adapter: two requests can
// share cached blocks only when both match, as in vLLM.
//
// A request's cache_salt is not part of the seed: vLLM carries it in the
// events' extra_keys, whose layout is still moving upstream. A salted
// request may therefore be credited with an unsalted block vLLM will not
// reuse — a worse route, never a wrong answer.
func Seed(model, lora string) uint64 {
	d := xxhash.New()
	_, _ = d.WriteString("warmpath/kvindex/v1\x00")
	_, _ = d.WriteString(model)
	_, _ = d.WriteString("\x00")
	_, _ = d.WriteString(lora)
	return d.Sum64()
}

// AppendKeys appends to dst the keys of the full blocks of tokens, chained
// from parent (Seed for the first block of a sequence, else the key of the
// block before): key = xxhash64(parent ‖ token ids), little-endian. A
// partial last block has no key, as vLLM caches only full blocks.
func AppendKeys(dst []uint64, parent uint64, tokens []uint32, blockSize int) []uint64 {
	if blockSize <= 0 {
		return dst
	}
	var stack [8 + 4*64]byte
	buf := stack[:0]
	if need := 8 + 4*blockSize; need > len(stack) {
		buf = make([]byte, 0, need)
	}
	for len(tokens) >= blockSize {
		buf = binary.LittleEndian.AppendUint64(buf[:0], parent)
		for _, t := range tokens[:blockSize] {
			buf = binary.LittleEndian.AppendUint32(buf, t)
		}
		parent = xxhash.Sum64(buf)
		dst = append(dst, parent)
		tokens = tokens[blockSize:]
	}
	return dst
}
