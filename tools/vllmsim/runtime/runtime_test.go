package runtime

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/warmpath/warmpath/libs/blockhash"
	"github.com/warmpath/warmpath/libs/timing"
	"github.com/warmpath/warmpath/tools/vllmsim/engine"
)

func newRuntime(t *testing.T, maxWaiting int) *Runtime {
	t.Helper()
	p, _ := timing.Lookup(timing.DefaultPreset)
	m, _ := timing.NewModel(p)
	h, _ := blockhash.New("0")
	e, err := engine.New(engine.Config{NumGPUBlocks: 64, MaxModelLen: 512, EnablePrefixCaching: true, Timing: m, Hasher: h})
	if err != nil {
		t.Fatal(err)
	}
	rt, err := New(Config{Engine: e, TimeScale: 1000, MaxWaiting: maxWaiting})
	if err != nil {
		t.Fatal(err)
	}
	return rt
}

func TestSubmitBoundedQueue(t *testing.T) {
	rt := newRuntime(t, 2)
	for i, id := range []string{"a", "b"} {
		if _, err := rt.Submit(&engine.Request{ID: id, Prompt: []uint32{1, 2, 3}, MaxTokens: 1}); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	_, err := rt.Submit(&engine.Request{ID: "c", Prompt: []uint32{1, 2, 3}, MaxTokens: 1})
	if !errors.Is(err, ErrOverloaded) {
		t.Fatalf("third request: got %v, want ErrOverloaded", err)
	}
}

func TestRunDeliversTokensInOrder(t *testing.T) {
	rt := newRuntime(t, 0)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rt.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	ch, err := rt.Submit(&engine.Request{ID: "a", Prompt: make([]uint32, 100), MaxTokens: 5})
	if err != nil {
		t.Fatal(err)
	}
	var got []Token
	timeout := time.After(10 * time.Second)
	for {
		select {
		case tok, ok := <-ch:
			if !ok {
				if len(got) != 5 || !got[0].First || !got[4].Final {
					t.Fatalf("got %d tokens (first=%v final=%v), want 5, first then final", len(got), got[0].First, got[len(got)-1].Final)
				}
				st := got[4].Stats
				if !(st.FirstToken > 0 && st.Finished >= st.FirstToken && st.OutputTokens == 5) {
					t.Fatalf("stats %+v: want first token > 0, finished after it, 5 tokens", st)
				}
				return
			}
			got = append(got, tok)
		case <-timeout:
			t.Fatalf("only %d tokens after 10s", len(got))
		}
	}
}
