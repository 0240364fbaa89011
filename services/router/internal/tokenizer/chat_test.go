package tokenizer

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/warmpath/warmpath/libs/chattemplate"
	"github.com/warmpath/warmpath/services/router/strategy"
)

// encodings are the tiktoken vocabularies the cuts are proven for.
var encodings = []string{"cl100k_base", "o200k_base", "p50k_base", "r50k_base"}

// TestChatPrefixReuseExact: over many growing conversations, for every
// encoding and built-in template, the ids built from a cached prefix plus
// the encoded rest equal encoding the whole rendering at once, and later
// turns do reuse.
func TestChatPrefixReuseExact(t *testing.T) {
	for _, enc := range encodings {
		for _, tmpl := range []string{"llama3", "chatml"} {
			t.Run(enc+"/"+tmpl, func(t *testing.T) {
				local, err := ParseLocal("m=" + enc + ":" + tmpl)
				if err != nil {
					t.Fatal(err)
				}
				c, err := New(Config{Local: local})
				if err != nil {
					t.Fatal(err)
				}
				m := local.model("m")
				rng := rand.New(rand.NewPCG(3, uint64(len(enc)+len(tmpl))))
				reused := 0
				for conv := range 60 {
					var msgs []strategy.Message
					for turn := range 1 + rng.IntN(5) {
						msgs = append(msgs, randomMessages(rng, 1+rng.IntN(2))...)
						req := &strategy.Request{Model: "m", Messages: slices.Clone(msgs)}
						res, err := c.Tokenize(context.Background(), "http://unused.invalid", req)
						if err != nil || !res.LocalChat {
							t.Fatalf("conversation %d turn %d: local %v err %v", conv, turn, res.LocalChat, err)
						}
						want := wholeIDs(t, m, req)
						if !slices.Equal(res.IDs, want) {
							t.Fatalf("conversation %d turn %d (reused %d): ids differ at %d of %d/%d\nmessages %q",
								conv, turn, res.ReusedTokens, firstDiff(res.IDs, want), len(res.IDs), len(want), msgs)
						}
						if res.ReusedTokens > 0 {
							reused++
						}
					}
				}
				if reused == 0 {
					t.Fatal("no turn reused a cached prefix")
				}
			})
		}
	}
}

// TestChatPrefixReuseTurns: a conversation's second turn reuses the first
// turn's ids, all but the tail.
func TestChatPrefixReuseTurns(t *testing.T) {
	tests := []struct {
		tmpl string
		// minReuse is the least of turn 1's ids turn 2 must reuse.
		minReuse int
	}{
		{"chatml", 10},
		{"llama3", 10},
	}
	for _, tt := range tests {
		t.Run(tt.tmpl, func(t *testing.T) {
			local, _ := ParseLocal("m=cl100k_base:" + tt.tmpl)
			c, _ := New(Config{Local: local})
			turn1 := []strategy.Message{{Role: "system", Content: "You are terse."}, {Role: "user", Content: strings.Repeat("Summarise this. ", 20)}}
			r1, err := c.Tokenize(context.Background(), "", &strategy.Request{Model: "m", Messages: turn1})
			if err != nil || r1.ReusedTokens != 0 {
				t.Fatalf("turn 1: reused %d, err %v", r1.ReusedTokens, err)
			}
			turn2 := append(slices.Clone(turn1), strategy.Message{Role: "assistant", Content: "Done."}, strategy.Message{Role: "user", Content: "More?"})
			r2, err := c.Tokenize(context.Background(), "", &strategy.Request{Model: "m", Messages: turn2})
			if err != nil || r2.ReusedTokens < tt.minReuse || r2.ReusedTokens >= len(r2.IDs) {
				t.Fatalf("turn 2: reused %d of %d, err %v", r2.ReusedTokens, len(r2.IDs), err)
			}
			if !slices.Equal(r2.IDs[:r2.ReusedTokens], r1.IDs[:r2.ReusedTokens]) {
				t.Fatal("turn 2 does not start with turn 1's ids")
			}
		})
	}
}

// TestLocalChatFallback: a chat whose template raises goes to the worker,
// and the failure is reported.
func TestLocalChatFallback(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.jinja")
	if err := os.WriteFile(path, []byte("{{ raise_exception('no system') if messages[0]['role'] == 'system' else 'ok' }}"), 0o600); err != nil {
		t.Fatal(err)
	}
	local, err := ParseLocal("m=cl100k_base:jinja:" + path)
	if err != nil {
		t.Fatal(err)
	}
	srv, calls := worker(t, http.StatusOK, 0)
	c, _ := New(Config{Local: local})
	res, err := c.Tokenize(context.Background(), srv.URL, &strategy.Request{Model: "m", Messages: []strategy.Message{{Role: "user", Content: "x"}}})
	if err != nil || !res.LocalChat || res.LocalErr != nil || calls.Load() != 0 {
		t.Fatalf("user chat: %+v, err %v, %d worker calls", res, err, calls.Load())
	}
	res, err = c.Tokenize(context.Background(), srv.URL, &strategy.Request{Model: "m", Messages: []strategy.Message{{Role: "system", Content: "x"}}})
	if err != nil || res.LocalChat || res.LocalErr == nil || calls.Load() != 1 || len(res.IDs) != 1 {
		t.Fatalf("system chat: %+v, err %v, %d worker calls", res, err, calls.Load())
	}
}

func TestParseLocalChat(t *testing.T) {
	tests := []struct {
		spec    string
		chat    bool
		wantErr bool
	}{
		{"m=cl100k_base", false, false},
		{"m=cl100k_base:llama3", true, false},
		{"m=o200k_base:chatml, n=cl100k_base", true, false},
		{"m=cl100k_base:mistral", false, true},
		{"m=cl100k_base:jinja:/no/such/file", false, true},
		{"m=:chatml", false, true},
	}
	for _, tt := range tests {
		t.Run(tt.spec, func(t *testing.T) {
			l, err := ParseLocal(tt.spec)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err %v", err)
			}
			if err == nil && (l.model("m").chat != nil) != tt.chat {
				t.Fatalf("chat template configured: %v, want %v", l.model("m").chat != nil, tt.chat)
			}
		})
	}
}

// FuzzChatPrefixReuse: whatever two turns of a conversation say, the
// second turn's ids built on the first's cached prefix equal encoding it
// whole.
func FuzzChatPrefixReuse(f *testing.F) {
	f.Add("user", "hello", "assistant", "hi!", "user", "more\n", false)
	f.Add("system", "<|im_end|>\n", "user", "|>", "tool", "\r\n", true)
	f.Add("user", "a  ", "_x", "!!<|", "assistant", "'s", true)
	ms := map[bool]*Local{}
	for _, chatml := range []bool{false, true} {
		tmpl := "llama3"
		if chatml {
			tmpl = "chatml"
		}
		l, err := ParseLocal("m=cl100k_base:" + tmpl)
		if err != nil {
			f.Fatal(err)
		}
		ms[chatml] = l
	}
	f.Fuzz(func(t *testing.T, r1, c1, r2, c2, r3, c3 string, chatml bool) {
		local := ms[chatml]
		c, err := New(Config{Local: local})
		if err != nil {
			t.Fatal(err)
		}
		turn1 := []strategy.Message{{Role: r1, Content: c1}}
		turn2 := append(slices.Clone(turn1), strategy.Message{Role: r2, Content: c2}, strategy.Message{Role: r3, Content: c3})
		for _, msgs := range [][]strategy.Message{turn1, turn2} {
			req := &strategy.Request{Model: "m", Messages: msgs}
			res, err := c.Tokenize(context.Background(), "", req)
			if err != nil {
				t.Fatal(err)
			}
			if want := wholeIDs(t, local.model("m"), req); !slices.Equal(res.IDs, want) {
				t.Fatalf("reused %d: ids differ at %d", res.ReusedTokens, firstDiff(res.IDs, want))
			}
		}
	})
}

// wholeIDs encodes req's whole rendering at once.
func wholeIDs(t testing.TB, m *localModel, req *strategy.Request) []uint32 {
	t.Helper()
	msgs := make([]chattemplate.Message, len(req.Messages))
	for i, msg := range req.Messages {
		msgs[i] = chattemplate.Message{Role: msg.Role, Content: msg.Content}
	}
	text, _, err := m.chat.render(msgs, true)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := m.encode(text)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

func firstDiff(a, b []uint32) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// randomMessages generates messages whose contents stress the cuts:
// template markers, punctuation and whitespace runs at either end,
// unicode, digits, long content.
func randomMessages(rng *rand.Rand, n int) []strategy.Message {
	roles := []string{"system", "user", "assistant", "tool", "_odd", "1st", " user", ""}
	bits := []string{"hello", " world", "\n", "\r\n", "\n\n", "  ", "\t", "<|", "|>", "<|im_end|>\n", "<|eot_id|>", "<|start_header_id|>",
		"<|endoftext|>", "'s", "'", "!!", "?", ".", "_", "naïve café", "日本語", "🚀", "12345", "3.14", "/", "\u00a0", "ÅÄÖ"}
	msgs := make([]strategy.Message, n)
	for i := range msgs {
		var sb strings.Builder
		for range rng.IntN(14) {
			sb.WriteString(bits[rng.IntN(len(bits))])
		}
		if rng.IntN(12) == 0 {
			sb.WriteString(strings.Repeat(fmt.Sprintf("long line %d. ", rng.IntN(100)), 100))
		}
		role := roles[rng.IntN(len(roles))]
		if rng.IntN(3) > 0 {
			role = roles[rng.IntN(4)]
		}
		msgs[i] = strategy.Message{Role: role, Content: sb.String()}
	}
	return msgs
}

// BenchmarkTokenizeChat: a multi-round chat's next turn (a long system
// prompt, four rounds of history), tokenized whole or on the previous
// turn's cached prefix.
func BenchmarkTokenizeChat(b *testing.B) {
	local, err := ParseLocal("m=cl100k_base:llama3")
	if err != nil {
		b.Fatal(err)
	}
	msgs := []strategy.Message{{Role: "system", Content: strings.Repeat("You answer questions about the policy below. ", 100)}}
	for r := range 4 {
		msgs = append(msgs, strategy.Message{Role: "user", Content: strings.Repeat(fmt.Sprintf("question %d about clause %d? ", r, r), 20)},
			strategy.Message{Role: "assistant", Content: strings.Repeat("the answer is in the clause. ", 10)})
	}
	prev := &strategy.Request{Model: "m", Messages: msgs}
	next := &strategy.Request{Model: "m", Messages: append(slices.Clone(msgs), strategy.Message{Role: "user", Content: "and then?"})}
	benchReuse(b, local, prev, next)
}
