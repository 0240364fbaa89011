package testwait

import (
	"sync/atomic"
	"testing"
	"time"
)

func TestForReturnsOnceTrue(t *testing.T) {
	var n atomic.Int32
	go func() {
		for range 3 {
			n.Add(1)
		}
	}()
	For(t, 5*time.Second, "three increments", func() bool { return n.Load() == 3 })
}

// fakeT records a failure instead of ending the test.
type fakeT struct {
	testing.TB
	failed string
}

func (f *fakeT) Helper() {}
func (f *fakeT) Fatalf(format string, args ...any) {
	f.failed = format
	panic(f)
}

func TestForFailsAtTheDeadline(t *testing.T) {
	ft := &fakeT{TB: t}
	func() {
		defer func() {
			if r := recover(); r != nil && r != ft {
				panic(r)
			}
		}()
		For(ft, 20*time.Millisecond, "never", func() bool { return false })
	}()
	if ft.failed == "" {
		t.Fatal("For returned without the condition and without failing")
	}
}
