package proxy

import (
	"testing"
)

func TestParseBody(t *testing.T) {
	tests := []struct {
		name      string
		in        string
		wantErr   string // param of the expected badRequest; "-" for none
		wantModel string
		wantText  string
		wantMsgs  int
		stream    bool
	}{
		{name: "completion", in: `{"model":"m","prompt":"hello","stream":true}`, wantErr: "-", wantModel: "m", wantText: "hello", stream: true},
		{name: "prompt list", in: `{"model":"m","prompt":["a","b"]}`, wantErr: "-", wantModel: "m", wantText: "a\nb"},
		{name: "token ids", in: `{"model":"m","prompt":[1,2,3]}`, wantErr: "-", wantModel: "m", wantText: "1 2 3"},
		{name: "token id lists", in: `{"model":"m","prompt":[[1],[2]]}`, wantErr: "-", wantModel: "m", wantText: "1\n2"},
		{name: "chat with parts", in: `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"hi"},{"type":"image_url","image_url":{"url":"x"}}]}]}`, wantErr: "-", wantModel: "m", wantMsgs: 1},
		{name: "missing model", in: `{"prompt":"x"}`, wantErr: "model"},
		{name: "empty model", in: `{"model":"","prompt":"x"}`, wantErr: "model"},
		{name: "model not a string", in: `{"model":3}`, wantErr: "model"},
		{name: "stream not a bool", in: `{"model":"m","stream":"yes"}`, wantErr: "stream"},
		{name: "malformed", in: `{"model":`, wantErr: ""},
		{name: "trailing", in: `{"model":"m"} x`, wantErr: ""},
		{name: "prompt object", in: `{"model":"m","prompt":{"a":1}}`, wantErr: "prompt"},
		{name: "content number", in: `{"model":"m","messages":[{"role":"user","content":5}]}`, wantErr: "messages"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := parseBody([]byte(tt.in))
			if tt.wantErr != "-" {
				br, ok := err.(*badRequest)
				if !ok {
					t.Fatalf("got %v, want a badRequest", err)
				}
				if br.param != tt.wantErr {
					t.Fatalf("param = %q, want %q (%s)", br.param, tt.wantErr, br.msg)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.model != tt.wantModel || p.route.Prompt != tt.wantText || len(p.route.Messages) != tt.wantMsgs || p.stream != tt.stream {
				t.Fatalf("got model %q prompt %q msgs %d stream %v", p.model, p.route.Prompt, len(p.route.Messages), p.stream)
			}
		})
	}
}

// FuzzParseBody feeds arbitrary bodies to the request parser: it must never
// panic, and it either returns a parsed request with a model or a
// badRequest.
func FuzzParseBody(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","prompt":"hello","stream":true}`,
		`{"model":"m","prompt":[1,2,3]}`,
		`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"user":"u"}`,
		`{"model":"m","prompt":[[1],[2]],"cache_salt":"s"}`,
		`{}`, `[]`, `null`, `{"model":`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		p, err := parseBody(in)
		if err != nil {
			if _, ok := err.(*badRequest); !ok {
				t.Fatalf("error %T %v is not a badRequest", err, err)
			}
			return
		}
		if p.model == "" || p.route.Model != p.model {
			t.Fatalf("parsed request without a model: %+v", p)
		}
	})
}
