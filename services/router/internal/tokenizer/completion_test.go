package tokenizer

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/warmpath/warmpath/libs/chattemplate"
	"github.com/warmpath/warmpath/services/router/strategy"
)

// FuzzPieceBoundary: at every place pieceBoundary names, encoding the text
// in two parts gives the ids of encoding it whole, in every encoding.
func FuzzPieceBoundary(f *testing.F) {
	for _, s := range []string{
		"The router caches.\nIt routes. Then it's done\n\nok 42\n7 dwarves",
		"naïve café über\nÉcole 中文 字 \u00a0nbsp word\r\nline",
		"don't  double  spaced words\n\t\ttabbed\n  indented\nx",
		"a b c d e f g h i j k l m n o p",
		"<|endoftext|> special\n<|im_start|>user words here",
	} {
		f.Add(s)
	}
	models := map[string]*localModel{}
	for _, enc := range encodings {
		l, err := ParseLocal("m=" + enc)
		if err != nil {
			f.Fatal(err)
		}
		models[enc] = l.model("m")
	}
	f.Fuzz(func(t *testing.T, text string) {
		if len(text) > 512 || !utf8.ValidString(text) {
			return
		}
		for _, enc := range encodings {
			m := models[enc]
			whole, err := m.encode(text)
			if err != nil {
				return // text the encoder refuses (a special token) is not routed on
			}
			for i := range len(text) {
				if !pieceBoundary(text, i) {
					continue
				}
				a, errA := m.encode(text[:i])
				b, errB := m.encode(text[i:])
				if errA != nil || errB != nil {
					t.Fatalf("%s: the parts of %q at %d fail to encode: %v, %v", enc, text, i, errA, errB)
				}
				if got := append(a, b...); !slices.Equal(got, whole) {
					t.Fatalf("%s: %q cut at %d (%q | %q): ids differ at %d", enc, text, i, text[:i], text[i:], firstDiff(got, whole))
				}
			}
		}
	})
}

// docPrompt is a document of n lines and a question.
func docPrompt(doc, n int, question string) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "Document %d, line %d: routers and caches share prefixes of long prompts.\n", doc, i)
	}
	b.WriteString("Question: " + question)
	return b.String()
}

// TestCompletionPrefixReuse: a document asked a second question is
// encoded only from its last kept prefix on; every answer has the ids of
// the whole text.
func TestCompletionPrefixReuse(t *testing.T) {
	local, err := ParseLocal("m=cl100k_base")
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(Config{Local: local})
	if err != nil {
		t.Fatal(err)
	}
	c.cutGrid = 256
	tests := []struct {
		name      string
		prompt    string
		reuseFrom int // at least this many ids reused
	}{
		{"first question", docPrompt(1, 40, "what is cached?"), 0},
		{"second question", docPrompt(1, 40, "and where is it routed, over many more words than before?"), 400},
		{"a longer document", docPrompt(1, 60, "what is cached?"), 400},
		{"another document", docPrompt(2, 40, "what is cached?"), 0},
		{"shorter than a grid step", "short prompt", 0},
	}
	for _, tt := range tests {
		req := &strategy.Request{Model: "m", Prompt: tt.prompt}
		res, err := c.Tokenize(context.Background(), "", req)
		if err != nil {
			t.Fatal(err)
		}
		want, err := local.model("m").encode(tt.prompt)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(res.IDs, want) {
			t.Fatalf("%s: ids differ at %d", tt.name, firstDiff(res.IDs, want))
		}
		if tt.reuseFrom == 0 && res.ReusedTokens != 0 || res.ReusedTokens < tt.reuseFrom {
			t.Errorf("%s: %d of %d ids reused, want %s", tt.name, res.ReusedTokens, len(want),
				map[bool]string{true: "none", false: fmt.Sprintf("≥ %d", tt.reuseFrom)}[tt.reuseFrom == 0])
		}
	}
}

// FuzzCompletionPrefixReuse: prompts sharing a prefix, tokenized in turn
// through one client (so later ones reuse earlier ones' prefixes), each
// get the ids of their whole text.
func FuzzCompletionPrefixReuse(f *testing.F) {
	f.Add("Shared document text\nwith lines and words ", "question one", "another question\nhere", uint8(16))
	f.Add("ab cd ef gh ij kl mn op qr st", " uv", "\nwx yz", uint8(4))
	local, err := ParseLocal("m=cl100k_base")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, shared, q1, q2 string, grid uint8) {
		if len(shared)+len(q1)+len(q2) > 1024 {
			return
		}
		c, err := New(Config{Local: local})
		if err != nil {
			t.Fatal(err)
		}
		c.cutGrid = int(grid)%64 + 2
		for _, p := range []string{shared + q1, shared + q2, shared + q1 + q2} {
			want, err := local.model("m").encode(p)
			if err != nil {
				return
			}
			res, err := c.Tokenize(context.Background(), "", &strategy.Request{Model: "m", Prompt: p})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(res.IDs, want) {
				t.Fatalf("grid %d, %q: reused %d, ids differ at %d", c.cutGrid, p, res.ReusedTokens, firstDiff(res.IDs, want))
			}
		}
	})
}

// BenchmarkTokenizeCompletion: an 8K-token document's second question,
// encoded whole and on the first question's cached prefix.
func BenchmarkTokenizeCompletion(b *testing.B) {
	local, err := ParseLocal("m=cl100k_base")
	if err != nil {
		b.Fatal(err)
	}
	prev := &strategy.Request{Model: "m", Prompt: docPrompt(1, 540, "what is cached?")}
	next := &strategy.Request{Model: "m", Prompt: docPrompt(1, 540, "and where is it routed?")}
	benchReuse(b, local, prev, next)
}

// benchReuse times tokenizing next with a fresh client, alone ("whole")
// and after prev ("reused"), whose cached prefix it must reuse.
func benchReuse(b *testing.B, local *Local, prev, next *strategy.Request) {
	for _, tt := range []struct {
		name  string
		reuse bool
	}{{"whole", false}, {"reused", true}} {
		b.Run(tt.name, func(b *testing.B) {
			tokens := 0
			for b.Loop() {
				b.StopTimer()
				c, _ := New(Config{Local: local})
				if tt.reuse {
					_, _ = c.Tokenize(context.Background(), "", prev)
				}
				b.StartTimer()
				res, err := c.Tokenize(context.Background(), "", next)
				if err != nil || res.ReusedTokens > 0 != tt.reuse {
					b.Fatalf("reused %d, err %v", res.ReusedTokens, err)
				}
				tokens = len(res.IDs)
			}
			b.ReportMetric(float64(tokens), "tokens")
		})
	}
}

// TestLongTextEncodedInSpans: a long prompt nothing caches is encoded in
// spans at piece cuts, several at once, at the default grid; the ids are
// the whole text's, for a completion and for a chat whose one message is a
// long document (message boundaries and piece cuts both bound spans).
func TestLongTextEncodedInSpans(t *testing.T) {
	local, err := ParseLocal("m=cl100k_base:llama3")
	if err != nil {
		t.Fatal(err)
	}
	doc := docPrompt(7, 2000, "which line mentions caches?") // about 150 KB: dozens of spans
	c, err := New(Config{Local: local})
	if err != nil {
		t.Fatal(err)
	}
	want, err := local.model("m").encode(doc)
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Tokenize(context.Background(), "", &strategy.Request{Model: "m", Prompt: doc})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.IDs, want) {
		t.Fatalf("completion: %d ids, want %d; they differ at %d", len(res.IDs), len(want), firstDiff(res.IDs, want))
	}
	chat := &strategy.Request{Model: "m", Messages: []strategy.Message{{Role: "system", Content: "Answer from the document."}, {Role: "user", Content: doc}}}
	text, _, err := local.model("m").chat.render([]chattemplate.Message{{Role: "system", Content: "Answer from the document."}, {Role: "user", Content: doc}}, true)
	if err != nil {
		t.Fatal(err)
	}
	if want, err = local.model("m").encode(text); err != nil {
		t.Fatal(err)
	}
	if res, err = c.Tokenize(context.Background(), "", chat); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.IDs, want) {
		t.Fatalf("chat: %d ids, want %d; they differ at %d", len(res.IDs), len(want), firstDiff(res.IDs, want))
	}
}
