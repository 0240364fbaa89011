package routerbench

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/warmpath/warmpath/libs/openai"
)

func TestNewWorkload(t *testing.T) {
	spec := WorkloadSpec{Model: "bench-model", PromptBytes: 8192, Prefixes: 4, PerPrefix: 3, MaxTokens: 16, Seed: 1}
	w, err := NewWorkload(spec)
	if err != nil {
		t.Fatal(err)
	}
	if len(w.Plain) != 12 || len(w.Stream) != 12 {
		t.Fatalf("got %d plain and %d stream bodies, want 12 each", len(w.Plain), len(w.Stream))
	}
	prompts := make([]string, len(w.Plain))
	for i := range w.Plain {
		for _, tc := range []struct {
			body   []byte
			stream bool
		}{{w.Plain[i], false}, {w.Stream[i], true}} {
			var req openai.CompletionRequest
			if err := json.Unmarshal(tc.body, &req); err != nil {
				t.Fatalf("body %d: %v", i, err)
			}
			if req.Model != "bench-model" || req.Stream != tc.stream || req.MaxTokens == nil || *req.MaxTokens != 16 {
				t.Errorf("body %d: got model %q stream %v max_tokens %v", i, req.Model, req.Stream, req.MaxTokens)
			}
			if got := len(req.Prompt.Texts[0]); got != 8192 {
				t.Errorf("body %d: prompt is %d bytes, want 8192", i, got)
			}
			if streamRequested(tc.body) != tc.stream {
				t.Errorf("body %d: the fake worker reads stream=%v, want %v", i, !tc.stream, tc.stream)
			}
			prompts[i] = req.Prompt.Texts[0]
		}
	}
	const prefixLen = 8192 * 3 / 4
	for i := range prompts {
		for j := range prompts {
			same := prompts[i][:prefixLen] == prompts[j][:prefixLen]
			if want := i%4 == j%4; same != want {
				t.Errorf("prompts %d and %d share a prefix: %v, want %v", i, j, same, want)
			}
			if i != j && prompts[i] == prompts[j] {
				t.Errorf("prompts %d and %d are identical", i, j)
			}
		}
	}
	again, _ := NewWorkload(spec)
	if string(again.Plain[5]) != string(w.Plain[5]) {
		t.Error("same seed gave different bodies")
	}
	if strings.ContainsAny(prompts[0], "\"\\\n") {
		t.Error("prompt has characters JSON escapes")
	}
}

func TestNewWorkloadRejects(t *testing.T) {
	if _, err := NewWorkload(WorkloadSpec{PromptBytes: 8192}); err == nil {
		t.Error("zero prefixes: got nil error")
	}
}
