package router

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/warmpath/warmpath/libs/testnet"
)

// TestLocalChatThroughRouter: kvaware routes a multi-turn chat with the
// in-process tokenizer, and the metrics count the reuse.
func TestLocalChatThroughRouter(t *testing.T) {
	ws := []*worker{startEventWorker(t, testnet.FreePortRun(t, 3, nil), "map", "--tokenizer", "cl100k_base", "--chat-template", "chatml")}
	r := startRouter(t, ws, append(kvEvents(), "--strategy", "kvaware", "--tokenizer-local", simModel+"=cl100k_base:chatml")...)
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
