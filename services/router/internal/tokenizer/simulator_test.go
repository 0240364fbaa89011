package tokenizer

import (
	"context"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	bpe "github.com/tiktoken-go/tokenizer"

	"github.com/warmpath/warmpath/libs/chattemplate"
	"github.com/warmpath/warmpath/services/router/strategy"
)

// simulatorIDs are the ids vllm-sim's /tokenize answers for req: its
// tokenize package renders a chat with libs/chattemplate's Render (the
// generation prompt added, vLLM's default) and encodes the text with
// tiktoken-go's codec. Reproduced here, so the router's in-process ids are
// checked against the simulator's without running it (the router does
// not depend on tools/); tests/router runs both processes together.
func simulatorIDs(t *testing.T, encoding string, tmpl chattemplate.Name, req *strategy.Request) []uint32 {
	t.Helper()
	codec, err := bpe.Get(bpe.Encoding(encoding))
	if err != nil {
		t.Fatal(err)
	}
	text := req.Prompt
	if req.Messages != nil {
		msgs := make([]chattemplate.Message, len(req.Messages))
		for i, m := range req.Messages {
			msgs[i] = chattemplate.Message{Role: m.Role, Content: m.Content}
		}
		text = tmpl.Render(msgs, true)
	}
	ids, _, err := codec.Encode(text)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]uint32, len(ids))
	for i, id := range ids {
		out[i] = uint32(id)
	}
	return out
}

// TestLocalTokenizerMatchesSimulator: the in-process BPE tokenizer gives
// the ids the simulator gives (it runs cl100k_base).
func TestLocalTokenizerMatchesSimulator(t *testing.T) {
	local, err := ParseLocal("m=cl100k_base")
	if err != nil {
		t.Fatal(err)
	}
	for _, prompt := range []string{
		"Hello, world!",
		"  leading spaces and\ttabs\nnew lines",
		"numbers 1234567890 and 3.14159",
		"unicode: naïve café — 日本語 🚀",
		strings.Repeat("a long shared document sentence. ", 200),
	} {
		want := simulatorIDs(t, "cl100k_base", "", &strategy.Request{Prompt: prompt})
		got, ok, err := local.Encode("m", prompt)
		if err != nil || !ok {
			t.Fatalf("local encode: ok %v err %v", ok, err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("prompt %.30q: local %d ids, simulator %d ids (first differ at %d)", prompt, len(got), len(want), firstDiff(got, want))
		}
	}
}

// TestLocalChatMatchesSimulator: for many generated conversations, growing
// turn by turn (so later turns build on cached prefixes), the router's
// in-process chat ids equal the simulator's — with the built-in template of
// the same name and with a Jinja template written to render it.
func TestLocalChatMatchesSimulator(t *testing.T) {
	tests := []struct {
		simTemplate chattemplate.Name
		local       string
		wantReuse   bool
	}{
		{chattemplate.Llama3, "llama3", true},
		{chattemplate.ChatML, "chatml", true},
		{chattemplate.ChatML, "jinja:../chatjinja/testdata/chatml.jinja", false},
	}
	for _, tt := range tests {
		t.Run(tt.local, func(t *testing.T) {
			local, err := ParseLocal("m=cl100k_base:" + tt.local)
			if err != nil {
				t.Fatal(err)
			}
			inproc, err := New(Config{Local: local})
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(11, uint64(len(tt.local))))
			reused, checked := 0, 0
			for conv := range 40 {
				var msgs []strategy.Message
				for turn := range 1 + rng.IntN(4) {
					msgs = append(msgs, chatTurn(rng, turn == 0)...)
					req := &strategy.Request{Model: "m", Messages: slices.Clone(msgs)}
					want := simulatorIDs(t, "cl100k_base", tt.simTemplate, req)
					got, err := inproc.Tokenize(context.Background(), "http://in-process.invalid", req)
					if err != nil || !got.LocalChat {
						t.Fatalf("conversation %d turn %d: in-process %+v, err %v", conv, turn, got.LocalChat, err)
					}
					if !slices.Equal(got.IDs, want) {
						t.Fatalf("conversation %d turn %d (reused %d): in-process %d ids, simulator %d (first differ at %d)\n%q",
							conv, turn, got.ReusedTokens, len(got.IDs), len(want), firstDiff(got.IDs, want), msgs)
					}
					checked++
					if got.ReusedTokens > 0 {
						reused++
					}
				}
			}
			t.Logf("%d chats equal to the simulator's, %d built on a cached prefix", checked, reused)
			if (reused > 0) != tt.wantReuse {
				t.Fatalf("%d chats reused a prefix; want reuse %v", reused, tt.wantReuse)
			}
		})
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
