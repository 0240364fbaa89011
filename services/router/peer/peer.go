// Package peer decides which of N router replicas owns a prompt, so that
// replicas behind one Service agree on where a prefix's cache is without
// sharing state: every replica computes the same owner for the same
// prompt head, and a replica that is not the owner forwards the request
// to it, as groupcache forwards a key to the peer that owns it. Only the
// owner learns from the decision, so the prefixaware table, kvaware's
// predictions and the session map each live in one replica per prompt
// family, as they would with a single router.
//
// The key is the prompt's head, not its tokens: a replica must decide
// whether to forward before it spends any time tokenizing, and two
// prompts that share a cache chunk (256 tokens, about 1 KiB of text)
// share their first KeyBytes bytes.
package peer

import (
	"encoding/binary"

	"github.com/cespare/xxhash/v2"

	"github.com/warmpath/warmpath/services/router/strategy"
)

// KeyBytes is how much of a prompt's text the owner is chosen by: less
// than one 256-token LMCache chunk of English text (about 4 bytes a
// token), so prompts sharing a chunk share an owner, and more than a
// chat template's header, so conversations with different system prompts
// spread.
const KeyBytes = 512

// KeyTokens is KeyBytes in tokens, for prompts sent as token IDs.
const KeyTokens = KeyBytes / 4

// Key is the ownership key of a text prompt (a completion's prompt, or a
// chat's messages as the router reads them).
func Key(prompt string) uint64 {
	return xxhash.Sum64String(prompt[:min(len(prompt), KeyBytes)])
}

// KeyOfTokens is the ownership key of a prompt given as token IDs.
func KeyOfTokens(ids []uint32) uint64 {
	d := xxhash.New()
	var b [4]byte
	for _, id := range ids[:min(len(ids), KeyTokens)] {
		binary.LittleEndian.PutUint32(b[:], id)
		_, _ = d.Write(b[:])
	}
	return d.Sum64()
}

// RequestKey is the ownership key of a request: its model, cache salt and
// adapter (which separate caches as the workers do) and its prompt's
// head — the completion prompt's text, else the chat messages' roles and
// contents in order, else the prompt's token IDs.
func RequestKey(r *strategy.Request) uint64 {
	d := xxhash.New()
	for _, s := range []string{r.Model, r.CacheSalt, r.LoRA} {
		_, _ = d.WriteString(s)
		_, _ = d.Write([]byte{0})
	}
	head := KeyBytes
	switch {
	case r.Prompt != "":
		_, _ = d.WriteString(r.Prompt[:min(len(r.Prompt), head)])
	case len(r.Messages) > 0:
		for _, m := range r.Messages {
			if head <= 0 {
				break
			}
			_, _ = d.WriteString(m.Role[:min(len(m.Role), head)])
			head -= min(len(m.Role), head)
			_, _ = d.Write([]byte{0})
			_, _ = d.WriteString(m.Content[:min(len(m.Content), head)])
			head -= min(len(m.Content), head)
			_, _ = d.Write([]byte{0})
		}
	default:
		return d.Sum64() ^ KeyOfTokens(r.TokenIDs)
	}
	return d.Sum64()
}
