package cluster

import (
	"errors"
	"testing"
	"time"

	"github.com/warmpath/warmpath/libs/lmproto"
)

// TestHealthBackoff walks a peer's health through ejection, probes and
// recovery; each step is an outcome at a time, and what allow says after.
func TestHealthBackoff(t *testing.T) {
	fail, miss := errors.New("timeout"), lmproto.ErrMiss
	t0 := time.Unix(0, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	h := &health{eject: 2, min: time.Second, max: 4 * time.Second, probe: 100 * time.Millisecond}
	steps := []struct {
		name    string
		now     time.Time
		allow   bool  // allow's answer at now
		outcome error // recorded at now when allowed (or an in-flight failure)
		record  bool
	}{
		{name: "first failure", now: at(0), allow: true, outcome: fail, record: true},
		{name: "second failure ejects", now: at(0), allow: true, outcome: fail, record: true},
		{name: "in-flight failure does not extend", now: at(0), outcome: fail, record: true},
		{name: "skipped", now: at(999 * time.Millisecond), allow: false},
		{name: "probe after 1s", now: at(time.Second), allow: true},
		{name: "others skip during the probe", now: at(time.Second), allow: false},
		{name: "probe fails: 2s", now: at(time.Second), outcome: fail, record: true},
		{name: "skipped within 2s", now: at(2900 * time.Millisecond), allow: false},
		{name: "second probe", now: at(3 * time.Second), allow: true, outcome: fail, record: true},
		{name: "capped at 4s", now: at(6900 * time.Millisecond), allow: false},
		{name: "third probe answers a miss", now: at(7 * time.Second), allow: true, outcome: miss, record: true},
		{name: "back", now: at(7 * time.Second), allow: true},
	}
	for _, s := range steps {
		if s.allow || !s.record {
			if got := h.allow(s.now); got != s.allow {
				t.Fatalf("%s: allow = %v, want %v", s.name, got, s.allow)
			}
		}
		if s.record {
			h.record(s.now, s.outcome)
		}
	}
}
