package openai

import (
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzRequestBodies feeds arbitrary bytes to the request decoders (the
// polymorphic prompt, stop and content fields are hand-written). Decoding
// must never panic, and a decoded prompt must survive a round trip.
func FuzzRequestBodies(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","prompt":"hi","max_tokens":3,"stream":true,"stream_options":{"include_usage":true}}`,
		`{"prompt":[1,2,3],"stop":"x"}`,
		`{"prompt":[[1],[2,3]],"stop":["a","b"]}`,
		`{"prompt":["a","b"]}`,
		`{"messages":[{"role":"user","content":[{"type":"text","text":"a"}]}],"max_completion_tokens":4}`,
		`{"messages":[{"role":"user","content":null}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var c CompletionRequest
		if json.Unmarshal(data, &c) == nil {
			b, err := json.Marshal(c.Prompt)
			if err != nil {
				t.Fatalf("marshal decoded prompt: %v", err)
			}
			var back Prompt
			if err := json.Unmarshal(b, &back); err != nil && c.Prompt.Len() > 0 {
				t.Fatalf("round trip of %s: %v", b, err)
			}
			if c.Prompt.Len() > 0 && !reflect.DeepEqual(back, c.Prompt) {
				t.Fatalf("round trip changed prompt: %+v → %+v", c.Prompt, back)
			}
		}
		var chat ChatCompletionRequest
		_ = json.Unmarshal(data, &chat)
		var tok TokenizeRequest
		_ = json.Unmarshal(data, &tok)
	})
}
