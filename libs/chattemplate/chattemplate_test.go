package chattemplate

import (
	"math/rand/v2"
	"strings"
	"testing"
)

func TestRender(t *testing.T) {
	msgs := []Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "Hi"}}
	tests := []struct {
		tmpl Name
		gen  bool
		want string
	}{
		{Llama3, true, "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
		{Llama3, false, "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"},
		{ChatML, true, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"},
		{ChatML, false, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"},
	}
	for _, tt := range tests {
		if got := tt.tmpl.Render(msgs, tt.gen); got != tt.want {
			t.Errorf("%s gen=%v:\n got %q\nwant %q", tt.tmpl, tt.gen, got, tt.want)
		}
	}
}

func TestParse(t *testing.T) {
	tests := []struct {
		in   string
		want Name
		ok   bool
	}{
		{"llama3", Llama3, true},
		{"chatml", ChatML, true},
		{"jinja", "", false},
		{"", "", false},
	}
	for _, tt := range tests {
		got, err := Parse(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("Parse(%q) = %q, %v", tt.in, got, err)
		}
	}
}

// TestBoundariesDependOnPrefixOnly: the text before cuts[k] is the same
// for any two conversations that share their first k messages, whatever
// follows and whether a generation prompt is asked — what lets a cache
// keyed by msgs[:k] hold it.
func TestBoundariesDependOnPrefixOnly(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tmpl := range Names {
		for range 500 {
			a := randomChat(rng)
			b := append(append([]Message(nil), a[:rng.IntN(len(a)+1)]...), randomChat(rng)...)
			ta, ca := tmpl.Boundaries(a, rng.IntN(2) == 0)
			tb, cb := tmpl.Boundaries(b, rng.IntN(2) == 0)
			if len(ca) != len(a)+1 || ca[0] != -1 {
				t.Fatalf("%s: %d cuts for %d messages, cuts[0] = %d", tmpl, len(ca), len(a), ca[0])
			}
			if ta != tmpl.Render(a, true) && ta != tmpl.Render(a, false) {
				t.Fatalf("%s: Boundaries' text is not Render's", tmpl)
			}
			for k := 1; k <= len(a) && k <= len(b) && equal(a[:k], b[:k]); k++ {
				if ca[k] < 0 || cb[k] < 0 {
					continue
				}
				if ta[:ca[k]] != tb[:cb[k]] {
					t.Fatalf("%s: cut %d differs for a shared prefix:\n%q\n%q", tmpl, k, ta[:ca[k]], tb[:cb[k]])
				}
			}
		}
	}
}

// TestBoundariesPlaces pins where the cuts fall.
func TestBoundariesPlaces(t *testing.T) {
	msgs := []Message{{Role: "system", Content: "S"}, {Role: "user", Content: "U"}, {Role: "_odd", Content: "X"}}
	tests := []struct {
		tmpl   Name
		gen    bool
		before []string // text before each cut, "" for none
	}{
		{ChatML, true, []string{"", "<|im_start|>system\nS<|im_end|>\n", "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n", "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>_odd\nX<|im_end|>\n"}},
		{Llama3, true, []string{"",
			"<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|><|start_header_id|>",
			"", // the next role starts with "_", which the punctuation run would take
			"<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nU<|eot_id|><|start_header_id|>_odd<|end_header_id|>\n\nX<|eot_id|><|start_header_id|>"}},
		{Llama3, false, []string{"", "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|><|start_header_id|>", "", ""}},
	}
	for _, tt := range tests {
		text, cuts := tt.tmpl.Boundaries(msgs, tt.gen)
		for k, want := range tt.before {
			got := ""
			if cuts[k] >= 0 {
				got = text[:cuts[k]]
			}
			if got != want {
				t.Errorf("%s gen=%v cut %d:\n got %q\nwant %q", tt.tmpl, tt.gen, k, got, want)
			}
		}
	}
}

func equal(a, b []Message) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return len(a) == len(b)
}

func randomChat(rng *rand.Rand) []Message {
	roles := []string{"system", "user", "assistant", "tool", "_x", ""}
	n := rng.IntN(5)
	msgs := make([]Message, n)
	for i := range msgs {
		var sb strings.Builder
		for range rng.IntN(8) {
			sb.WriteString([]string{"a", " ", "\n", "<|", "|>", "é", "日本", "12", "!"}[rng.IntN(9)])
		}
		msgs[i] = Message{Role: roles[rng.IntN(len(roles))], Content: sb.String()}
	}
	return msgs
}
