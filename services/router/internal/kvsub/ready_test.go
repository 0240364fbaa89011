package kvsub_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warmpath/warmpath/libs/testwait"
	"github.com/warmpath/warmpath/services/router/internal/kvsub"
	"github.com/warmpath/warmpath/services/router/internal/pool"
	"github.com/warmpath/warmpath/services/router/kvindex"
)

// watchedWorker is a pool endpoint whose reads of its models are counted
// and whose waits for them are announced on waiting.
type watchedWorker struct {
	*pool.Endpoint
	reads   atomic.Int64
	waiting chan struct{}
}

func (w *watchedWorker) Models() []string {
	w.reads.Add(1)
	return w.Endpoint.Models()
}

func (w *watchedWorker) ModelsChanged() <-chan struct{} {
	ch := w.Endpoint.ModelsChanged()
	w.waiting <- struct{}{}
	return ch
}

// waitForWait returns once the subscription waits for w's models.
func waitForWait(t *testing.T, w *watchedWorker) {
	t.Helper()
	select {
	case <-w.waiting:
	case <-time.After(5 * time.Second):
		t.Fatal("the subscription never waited for the worker's models")
	}
}

// TestSubscriptionWaitsForModels: a worker's subscription starts when its
// models become known, woken by the endpoint rather than by polling: its
// models are read once before and once after, however long the wait.
func TestSubscriptionWaitsForModels(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const url = "http://127.0.0.1:8000"
	// Nothing listens on port 1: the subscription, once started, retries
	// its dial, which is not what this test watches.
	m := kvsub.New(kvsub.Config{Endpoint: "tcp://127.0.0.1:1", RetryInterval: time.Hour}, kvindex.New(1<<10), nil)
	w := &watchedWorker{Endpoint: pool.NewEndpoint(url, ""), waiting: make(chan struct{}, 4)}
	m.Start(ctx, url, w)
	defer m.Stop(url)

	waitForWait(t, w)
	// Three periods of the 100ms poll this replaced.
	time.Sleep(300 * time.Millisecond)
	if n := w.reads.Load(); n != 1 {
		t.Fatalf("models read %d times while unknown, want once", n)
	}
	if _, started := m.Held(url, kvindex.GPU); started {
		t.Fatal("the subscription started before the worker's models were known")
	}

	w.SetModels(nil) // probed, serving nothing yet: wait on
	waitForWait(t, w)
	w.SetModels([]string{"m"})
	testwait.For(t, 5*time.Second, "the subscription to start", func() bool {
		_, started := m.Held(url, kvindex.GPU)
		return started
	})
	if n := w.reads.Load(); n > 3 {
		t.Fatalf("models read %d times, want at most 3: once at the start and once per change", n)
	}
}

// TestStopWhileWaitingForModels: a worker that never reports its models
// does not hold its subscription past Stop.
func TestStopWhileWaitingForModels(t *testing.T) {
	const url = "http://127.0.0.1:8000"
	m := kvsub.New(kvsub.Config{Endpoint: "tcp://127.0.0.1:1"}, kvindex.New(1<<10), nil)
	w := &watchedWorker{Endpoint: pool.NewEndpoint(url, ""), waiting: make(chan struct{}, 4)}
	m.Start(context.Background(), url, w)
	waitForWait(t, w)
	stopped := make(chan struct{})
	go func() {
		m.Stop(url)
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("Stop did not end a subscription waiting for the worker's models")
	}
}
