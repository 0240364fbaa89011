package chatjinja

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/warmpath/warmpath/libs/chattemplate"
)

// TestMatchesBuiltins: Jinja versions of the built-in templates render
// exactly what the built-ins render, for many generated conversations.
func TestMatchesBuiltins(t *testing.T) {
	tests := []struct {
		file    string
		builtin chattemplate.Name
		bos     string
	}{
		{"llama3.jinja", chattemplate.Llama3, "<|begin_of_text|>"},
		{"chatml.jinja", chattemplate.ChatML, ""},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			tmpl, err := Load(filepath.Join("testdata", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			tmpl.bos = tt.bos
			rng := rand.New(rand.NewPCG(7, 8))
			for i := range 300 {
				msgs := RandomChat(rng)
				gen := i%3 != 0
				got, err := tmpl.Render(msgs, gen)
				if err != nil {
					t.Fatal(err)
				}
				if want := tt.builtin.Render(msgs, gen); got != want {
					t.Fatalf("conversation %d (gen %v):\n got %q\nwant %q", i, gen, got, want)
				}
			}
		})
	}
}

func TestTokenizerConfig(t *testing.T) {
	tmpl, err := Load(filepath.Join("testdata", "tokenizer_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := tmpl.Render([]chattemplate.Message{{Role: "system", Content: "  Be brief. "}, {Role: "user", Content: "Hi\n"}}, true)
	if err != nil {
		t.Fatal(err)
	}
	// Meta's template trims each content; bos_token comes from the config.
	want := "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
	if got != want {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
}

func TestNamedTemplateAndRaise(t *testing.T) {
	tmpl, err := Load(filepath.Join("testdata", "named.json"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := tmpl.Render([]chattemplate.Message{{Role: "user", Content: "Hi"}}, true)
	if want := "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n"; err != nil || got != want {
		t.Fatalf("got %q, %v; want %q", got, err, want)
	}
	if _, err := tmpl.Render([]chattemplate.Message{{Role: "system", Content: "x"}}, true); err == nil || !strings.Contains(err.Error(), "System role not supported") {
		t.Fatalf("raise_exception: err %v", err)
	}
}

func TestParseFile(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		src     string
		bos     string
		wantErr bool
	}{
		{"bare template", "{{ messages }}", "{{ messages }}", "", false},
		{"config", `{"chat_template": "T", "bos_token": "<s>"}`, "T", "<s>", false},
		{"added token", `{"chat_template": "T", "bos_token": {"content": "<s>"}}`, "T", "<s>", false},
		{"named", `{"chat_template": [{"name": "default", "template": "D"}]}`, "D", "", false},
		{"no default", `{"chat_template": [{"name": "tool_use", "template": "D"}]}`, "", "", true},
		{"no template", `{"bos_token": "<s>"}`, "", "", true},
		{"bad token", `{"chat_template": "T", "bos_token": 3}`, "", "", true},
		{"empty", "  \n", "", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src, bos, _, err := ParseFile([]byte(tt.in))
			if (err != nil) != tt.wantErr || src != tt.src || bos != tt.bos {
				t.Fatalf("ParseFile = %q, %q, %v", src, bos, err)
			}
		})
	}
}

func TestBadTemplate(t *testing.T) {
	if _, err := New("{% for m in messages %}", "", ""); err == nil {
		t.Fatal("unterminated for accepted")
	}
	if _, err := Load(filepath.Join("testdata", "missing.jinja")); err == nil {
		t.Fatal("missing file accepted")
	}
	tmpl, err := New("{{ raise_exception('no') }}", "", "")
	if err != nil {
		t.Fatal(err)
	}
	// gonja flattens the function's error into its own message.
	if _, err := tmpl.Render(nil, true); err == nil || !strings.Contains(err.Error(), errRaised.Error()) {
		t.Fatalf("err %v, want the raised exception", err)
	}
}

// FuzzParseFile: whatever a template file holds, parsing it errs or gives
// a template, never panics.
func FuzzParseFile(f *testing.F) {
	for _, s := range []string{"{{ x }}", `{"chat_template": "T"}`, `{"chat_template": [{"name": "default", "template": "{% if %}"}]}`, "{% for %}", "{"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		src, bos, eos, err := ParseFile(raw)
		if err != nil {
			return
		}
		if tmpl, err := New(src, bos, eos); err == nil {
			_, _ = tmpl.Render([]chattemplate.Message{{Role: "user", Content: "x"}}, true)
		}
	})
}

// TestConcurrentRender: one template serves every request at once (run
// with -race).
func TestConcurrentRender(t *testing.T) {
	tmpl, err := Load(filepath.Join("testdata", "tokenizer_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	want, _ := tmpl.Render([]chattemplate.Message{{Role: "user", Content: "x"}}, true)
	errs := make(chan error, 8)
	for g := range 8 {
		go func() {
			var err error
			for i := range 50 {
				got, rerr := tmpl.Render([]chattemplate.Message{{Role: "user", Content: "x"}}, i%2 == 0 || g < 0)
				if rerr != nil || (i%2 == 0 && got != want) {
					err = fmt.Errorf("render %d: %q, %v", i, got, rerr)
					break
				}
			}
			errs <- err
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}
