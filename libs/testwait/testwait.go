// Package testwait is for tests: wait until something has happened, with a
// deadline, instead of sleeping for a guessed time and hoping it did.
package testwait

import (
	"testing"
	"time"
)

// Poll is how often For checks its condition.
const Poll = 5 * time.Millisecond

// For calls cond every Poll until it returns true, and fails t (with what,
// the thing waited for) if that has not happened within timeout.
func For(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(Poll)
	}
}
