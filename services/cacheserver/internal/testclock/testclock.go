// Package testclock is a clock that tests move by hand, so that expiry,
// backoff and rate windows are tested without waiting on real time.
package testclock

import (
	"sync"
	"time"
)

// Clock is a time source that only moves when Advance is called. It is
// safe for concurrent use, as the code under test reads it from its own
// goroutines.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// New returns a clock standing at a fixed instant (2027-01-15), so the
// times a failing test prints read the same on every run.
func New() *Clock { return &Clock{t: time.Unix(1_800_000_000, 0)} }

// Now is the clock's time; pass the method value where code takes a
// func() time.Time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// In is the instant d after Now in Unix nanoseconds, the form the store
// keeps expiry times in.
func (c *Clock) In(d time.Duration) int64 { return c.Now().Add(d).UnixNano() }
