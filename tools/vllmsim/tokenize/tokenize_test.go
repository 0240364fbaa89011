package tokenize

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/warmpath/warmpath/libs/openai"
)

func TestRoundTrip(t *testing.T) {
	for _, enc := range Encodings {
		t.Run(enc, func(t *testing.T) {
			tok, err := New(enc, Llama3)
			if err != nil {
				t.Fatal(err)
			}
			text := "The quick brown fox jumps over the lazy dog. Ünïcödé ✓ 12345"
			ids, err := tok.Encode(text)
			if err != nil {
				t.Fatal(err)
			}
			if len(ids) < 10 || len(ids) > len(text) {
				t.Fatalf("encoded %d tokens for %d bytes", len(ids), len(text))
			}
			got, err := tok.Decode(ids)
			if err != nil || got != text {
				t.Fatalf("Decode(Encode(x)) = %q, %v; want %q", got, err, text)
			}
			if err := tok.Validate(ids); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestKnownTokens(t *testing.T) {
	// "hello world" in cl100k_base is [15339, 1917] (tiktoken reference).
	tok, err := New("cl100k_base", Llama3)
	if err != nil {
		t.Fatal(err)
	}
	ids, _ := tok.Encode("hello world")
	if want := []uint32{15339, 1917}; !slices.Equal(ids, want) {
		t.Fatalf("Encode(hello world) = %v, want %v", ids, want)
	}
}

func TestInvalidTokens(t *testing.T) {
	tok, _ := New("cl100k_base", Llama3)
	if err := tok.Validate([]uint32{1, 999999}); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("Validate = %v, want ErrInvalidToken", err)
	}
	if _, err := tok.Decode([]uint32{999999}); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("Decode = %v, want ErrInvalidToken", err)
	}
	if _, err := New("bogus", Llama3); err == nil {
		t.Fatal("unknown encoding accepted")
	}
}

func TestTemplates(t *testing.T) {
	msgs := []openai.ChatMessage{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "Hi"}}
	tests := []struct {
		tmpl Template
		gen  bool
		want string
	}{
		{Llama3, true, "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
		{Llama3, false, "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"},
		{ChatML, true, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"},
	}
	for _, tt := range tests {
		if got := tt.tmpl.Render(Messages(msgs), tt.gen); got != tt.want {
			t.Errorf("%s gen=%v:\n got %q\nwant %q", tt.tmpl, tt.gen, got, tt.want)
		}
	}
	if _, err := ParseTemplate("jinja"); err == nil {
		t.Fatal("unknown template accepted")
	}
}

func TestGeneratorDeterministic(t *testing.T) {
	tok, _ := New("cl100k_base", Llama3)
	p := []uint32{1, 2, 3}
	a, b, c := tok.Generator(p, 0), tok.Generator(p, 0), tok.Generator(p, 1)
	var sa, sb, sc []uint32
	for i := range 20 {
		sa, sb, sc = append(sa, a(i)), append(sb, b(i)), append(sc, c(i))
	}
	if !slices.Equal(sa, sb) {
		t.Fatal("same prompt and seed gave different outputs")
	}
	if slices.Equal(sa, sc) {
		t.Fatal("different seeds gave the same output")
	}
	text, err := tok.Decode(sa)
	if err != nil || len(strings.Fields(text)) != 20 {
		t.Fatalf("generated text %q (%v), want 20 words", text, err)
	}
}
