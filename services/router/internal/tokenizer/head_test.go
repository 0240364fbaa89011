package tokenizer

import (
	"context"
	"slices"
	"testing"

	"github.com/warmpath/warmpath/services/router/strategy"
)

// TestStartHandsTheHeadFirst: a long completion prompt the router has not
// encoded any prefix of comes back as its head at once, the first ids of
// the whole, with an estimate of the whole's length; the whole follows
// and is cached like any answer. Prompts Tokenize serves as fast (short,
// a chat, a prefix encoded before, no local vocabulary) get no head.
func TestStartHandsTheHeadFirst(t *testing.T) {
	local, err := ParseLocal("m=cl100k_base:llama3")
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(Config{Local: local})
	if err != nil {
		t.Fatal(err)
	}
	doc := docPrompt(3, 540, "what is cached?") // about 40 KB, 8K tokens
	want, err := local.model("m").encode(doc)
	if err != nil {
		t.Fatal(err)
	}
	p := c.Start(&strategy.Request{Model: "m", Prompt: doc})
	if p == nil {
		t.Fatal("no head for a long prompt never seen")
	}
	if len(p.Head) == 0 || len(p.Head) >= len(want)/4 || !slices.Equal(p.Head, want[:len(p.Head)]) {
		t.Fatalf("head of %d ids is not a short prefix of the whole's %d", len(p.Head), len(want))
	}
	if off := float64(p.Estimate)/float64(len(want)) - 1; off < -0.1 || off > 0.1 {
		t.Fatalf("estimate %d for %d tokens", p.Estimate, len(want))
	}
	res, err := p.Wait()
	if err != nil || !slices.Equal(res.IDs, want) {
		t.Fatalf("whole: %d ids (err %v), want %d; differ at %d", len(res.IDs), err, len(want), firstDiff(res.IDs, want))
	}
	if again, _ := c.Tokenize(context.Background(), "", &strategy.Request{Model: "m", Prompt: doc}); !again.Cached {
		t.Fatal("the whole was not cached")
	}

	for _, tt := range []struct {
		name string
		req  *strategy.Request
	}{
		{"short", &strategy.Request{Model: "m", Prompt: docPrompt(4, 100, "why?")}},
		{"the same prompt again", &strategy.Request{Model: "m", Prompt: doc}},
		{"a prefix encoded before", &strategy.Request{Model: "m", Prompt: docPrompt(3, 540, "and where is it routed?")}},
		{"a chat", &strategy.Request{Model: "m", Messages: []strategy.Message{{Role: "user", Content: docPrompt(5, 540, "why?")}}}},
		{"no local vocabulary", &strategy.Request{Model: "other", Prompt: docPrompt(6, 540, "why?")}},
	} {
		if p := c.Start(tt.req); p != nil {
			t.Errorf("%s: a head (%d ids), want none", tt.name, len(p.Head))
		}
	}
}

// TestPendingEncodesOnce: the whole of a head-routed prompt is encoded
// only when asked for, once, whichever of Wait (a request waits: every
// core) and WaitBackground (none does: one core) asks first; every caller
// gets the whole prompt's ids, which are then cached.
func TestPendingEncodesOnce(t *testing.T) {
	local, err := ParseLocal("m=cl100k_base")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name  string
		first func(*Pending) (Result, error)
	}{
		{"background first", (*Pending).WaitBackground},
		{"on the path first", (*Pending).Wait},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := New(Config{Local: local})
			if err != nil {
				t.Fatal(err)
			}
			doc := docPrompt(8, 540, "what is cached?")
			req := &strategy.Request{Model: "m", Prompt: doc}
			want, err := local.model("m").encode(doc)
			if err != nil {
				t.Fatal(err)
			}
			p := c.Start(req)
			if p == nil {
				t.Fatal("no head for a long prompt never seen")
			}
			if c.cache.has(cacheKey(req)) {
				t.Fatal("the whole was encoded before anyone asked for it")
			}
			results := make(chan Result, 3)
			for _, wait := range []func(*Pending) (Result, error){tt.first, (*Pending).Wait, (*Pending).WaitBackground} {
				go func() {
					res, err := wait(p)
					if err != nil {
						t.Error(err)
					}
					results <- res
				}()
			}
			for range 3 {
				if res := <-results; !slices.Equal(res.IDs, want) {
					t.Fatalf("%d ids, want the whole's %d; differ at %d", len(res.IDs), len(want), firstDiff(res.IDs, want))
				}
			}
			if again, _ := c.Tokenize(context.Background(), "", req); !again.Cached {
				t.Fatal("the whole was not cached")
			}
		})
	}
}
