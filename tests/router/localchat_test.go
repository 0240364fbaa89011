package app

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/warmpath/warmpath/services/router/internal/tokenizer"
	"github.com/warmpath/warmpath/services/router/strategy"
)

// TestLocalChatMatchesWorker: for many generated conversations, growing
// turn by turn (so later turns build on cached prefixes), the router's
// in-process chat ids equal vllm-sim's /tokenize ids — with the built-in
// template of the same name and with a Jinja template written to render
// it.
func TestLocalChatMatchesWorker(t *testing.T) {
	tests := []struct {
		simTemplate string
		local       string
		wantReuse   bool
	}{
		{"llama3", "llama3", true},
		{"chatml", "chatml", true},
		{"chatml", "jinja:../chatjinja/testdata/chatml.jinja", false},
	}
	for _, tt := range tests {
		t.Run(tt.local, func(t *testing.T) {
			w := startWorker(t, "--tokenizer", "cl100k_base", "--chat-template", tt.simTemplate)
			local, err := tokenizer.ParseLocal(simModel + "=cl100k_base:" + tt.local)
			if err != nil {
				t.Fatal(err)
			}
			inproc, err := tokenizer.New(tokenizer.Config{Local: local})
			if err != nil {
				t.Fatal(err)
			}
			remote, err := tokenizer.New(tokenizer.Config{Timeout: 5e9})
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(11, uint64(len(tt.local))))
			reused, checked := 0, 0
			for conv := range 40 {
				var msgs []strategy.Message
				for turn := range 1 + rng.IntN(4) {
					msgs = append(msgs, chatTurn(rng, turn == 0)...)
					req := &strategy.Request{Model: simModel, Messages: slices.Clone(msgs)}
					want, err := remote.Tokenize(context.Background(), w.url, req)
					if err != nil {
						t.Fatal(err)
					}
					got, err := inproc.Tokenize(context.Background(), "http://in-process.invalid", req)
					if err != nil || !got.LocalChat {
						t.Fatalf("conversation %d turn %d: in-process %+v, err %v", conv, turn, got.LocalChat, err)
					}
					if !slices.Equal(got.IDs, want.IDs) {
						t.Fatalf("conversation %d turn %d (reused %d): in-process %d ids, worker %d (first differ at %d)\n%q",
							conv, turn, got.ReusedTokens, len(got.IDs), len(want.IDs), firstDiff(got.IDs, want.IDs), msgs)
					}
					checked++
					if got.ReusedTokens > 0 {
						reused++
					}
				}
			}
			t.Logf("%d chats equal to the worker's, %d built on a cached prefix", checked, reused)
			if (reused > 0) != tt.wantReuse {
				t.Fatalf("%d chats reused a prefix; want reuse %v", reused, tt.wantReuse)
			}
		})
	}
}

// TestLocalChatThroughRouter: kvaware routes a multi-turn chat with the
// in-process tokenizer, and the metrics count the reuse.
func TestLocalChatThroughRouter(t *testing.T) {
	ws := []*worker{startEventWorker(t, freePortRun(t), "map", "--tokenizer", "cl100k_base", "--chat-template", "chatml")}
	local, err := tokenizer.ParseLocal(simModel + "=cl100k_base:chatml")
	if err != nil {
		t.Fatal(err)
	}
	r := startRouter(t, ws, kvEvents, func(o *Options) {
		o.Routing.Name = "kvaware"
		o.Tokenizer.Local = local
	})
	msgs := []map[string]string{{"role": "system", "content": strings.Repeat("Policy text. ", 100)}}
	for turn := range 3 {
		msgs = append(msgs, map[string]string{"role": "user", "content": fmt.Sprintf("Question %d?", turn)})
		b, _ := json.Marshal(map[string]any{"model": simModel, "max_tokens": 2, "messages": msgs})
		sendAll(t, r.url+"/v1/chat/completions", []string{string(b)})
		msgs = append(msgs, map[string]string{"role": "assistant", "content": "Answer."})
	}
	if got := scrape(t, r.url+"/metrics", `warmpath_router_tokenize_local_chat_total{result="reused"}`); got != 2 {
		t.Errorf(`tokenize_local_chat_total{result="reused"} = %v, want 2 (turns 2 and 3)`, got)
	}
	if got := scrape(t, r.url+"/metrics", `warmpath_router_tokenize_local_chat_total{result="rendered"}`); got != 1 {
		t.Errorf(`tokenize_local_chat_total{result="rendered"} = %v, want 1 (turn 1)`, got)
	}
	if got := scrape(t, r.url+"/metrics", "warmpath_router_tokenize_reused_tokens_total"); got < 200 {
		t.Errorf("tokenize_reused_tokens_total = %v, want the system prompt's tokens twice at least", got)
	}
}

// chatTurn generates a turn's messages: a system prompt first, then an
// assistant reply (after the first turn) and a user message, of varied
// content — unicode, template markers, whitespace and punctuation runs at
// either end, long text.
func chatTurn(rng *rand.Rand, first bool) []strategy.Message {
	bits := []string{"hello", " world", "\n", "\n\n", "  ", "\t", "<|", "|>", "<|im_end|>\n", "<|eot_id|>", "'s", "!!", "?", "_",
		"naïve café", "日本語", "🚀", "12345", "3.14", "\u00a0", "{{ x }}"}
	content := func() string {
		var sb strings.Builder
		for range rng.IntN(16) {
			sb.WriteString(bits[rng.IntN(len(bits))])
		}
		if rng.IntN(10) == 0 {
			sb.WriteString(strings.Repeat("a long shared document sentence. ", 100))
		}
		return sb.String()
	}
	var msgs []strategy.Message
	if first {
		if rng.IntN(2) == 0 {
			msgs = append(msgs, strategy.Message{Role: "system", Content: content()})
		}
	} else {
		msgs = append(msgs, strategy.Message{Role: "assistant", Content: content()})
		if rng.IntN(5) == 0 {
			msgs = append(msgs, strategy.Message{Role: "tool", Content: content()})
		}
	}
	return append(msgs, strategy.Message{Role: "user", Content: content()})
}
