package limiter

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

func TestOverflowAndFIFO(t *testing.T) {
	l := New(Config{MaxConcurrent: 1, MaxQueue: 2, QueueTimeout: 5 * time.Second})
	rel, err := l.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var order []int
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := l.Acquire(context.Background())
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			r()
		}()
		// Let each waiter enqueue before the next, so FIFO order is known.
		for {
			if _, q := l.Stats(); q == i+1 {
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
	if _, err := l.Acquire(context.Background()); !errors.Is(err, ErrOverflow) {
		t.Fatalf("4th request: got %v, want ErrOverflow", err)
	}
	rel()
	rel() // a second call is a no-op
	wg.Wait()
	if len(order) != 2 || order[0] != 0 || order[1] != 1 {
		t.Fatalf("waiters ran in order %v, want [0 1]", order)
	}
	if a, q := l.Stats(); a != 0 || q != 0 {
		t.Fatalf("after all released: active %d queued %d, want 0 0", a, q)
	}
}

func TestQueueTimeoutAndCancel(t *testing.T) {
	l := New(Config{MaxConcurrent: 1, MaxQueue: 5, QueueTimeout: 20 * time.Millisecond})
	rel, _ := l.Acquire(context.Background())
	defer rel()
	if _, err := l.Acquire(context.Background()); !errors.Is(err, ErrQueueTimeout) {
		t.Fatalf("got %v, want ErrQueueTimeout", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := l.Acquire(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	if _, q := l.Stats(); q != 0 {
		t.Fatalf("queue holds %d abandoned waiters, want 0", q)
	}
}

func TestSetConfigWakesWaiters(t *testing.T) {
	l := New(Config{MaxConcurrent: 1, MaxQueue: 1, QueueTimeout: 5 * time.Second})
	rel, _ := l.Acquire(context.Background())
	defer rel()
	done := make(chan error, 1)
	go func() {
		r, err := l.Acquire(context.Background())
		if r != nil {
			r()
		}
		done <- err
	}()
	for {
		if _, q := l.Stats(); q == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	l.SetConfig(Config{MaxConcurrent: 2, MaxQueue: 1})
	if err := <-done; err != nil {
		t.Fatalf("waiter after raising the limit: %v", err)
	}
}

func TestUnlimited(t *testing.T) {
	l := New(Config{})
	for range 100 {
		if _, err := l.Acquire(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

func TestWaitForChange(t *testing.T) {
	l := New(Config{QueueTimeout: 5 * time.Second})
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		// Notify until the waiter has returned: a notification before it
		// starts waiting is (correctly) not seen.
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
				l.Notify()
			}
		}
	}()
	if err := l.WaitForChange(context.Background(), l.Changed()); err != nil {
		t.Fatal(err)
	}
}
