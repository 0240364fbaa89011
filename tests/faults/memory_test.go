package faults

import (
	"context"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/warmpath/warmpath/tests/harness"
)

// memSampler records the peak memory of each container of a scenario,
// sampling every half second until the test ends.
type memSampler struct {
	mu    sync.Mutex
	ctrs  map[string]*harness.Container
	peaks map[string]float64
}

// sampleMemory starts sampling ctrs (by name) and stops when t ends.
func sampleMemory(t *testing.T, ctrs map[string]*harness.Container) *memSampler {
	m := &memSampler{ctrs: map[string]*harness.Container{}, peaks: map[string]float64{}}
	for name, c := range ctrs {
		m.add(name, c)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			m.sample(ctx)
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return m
}

// add samples c too, under name.
func (m *memSampler) add(name string, c *harness.Container) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ctrs[name] = c
}

func (m *memSampler) sample(ctx context.Context) {
	m.mu.Lock()
	ctrs := maps.Clone(m.ctrs)
	m.mu.Unlock()
	for name, c := range ctrs {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		b, err := c.MemoryBytes(sctx)
		cancel()
		if err != nil {
			continue // stopped, killed or paused: nothing to read now
		}
		m.mu.Lock()
		m.peaks[name] = max(m.peaks[name], float64(b))
		m.mu.Unlock()
	}
}

// snapshot returns the peaks so far.
func (m *memSampler) snapshot() map[string]float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.peaks)
}
