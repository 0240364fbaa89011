package store

// Observer is told that a key may have entered or left a tier: stored,
// replaced, deleted, evicted, reclaimed after its expiry, loaded from disk,
// or written behind. It says nothing about which: the reader asks Present
// afterwards, so a notification it coalesces with later ones, or handles
// late, still ends at the truth. The tiers call it with their own lock held
// (so a change is never visible before it is announced): it must return
// quickly, never block and never call into the store.
type Observer func(key string)
