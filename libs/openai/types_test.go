package openai

import (
	"encoding/json"
	"reflect"
	"testing"
)

func TestPromptUnmarshal(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    Prompt
		wantErr bool
	}{
		{name: "string", in: `"hello"`, want: Prompt{Texts: []string{"hello"}}},
		{name: "list of strings", in: `["a","b"]`, want: Prompt{Texts: []string{"a", "b"}}},
		{name: "token ids", in: `[1,2,3]`, want: Prompt{Tokens: [][]uint32{{1, 2, 3}}}},
		{name: "token id lists", in: `[[1],[2,3]]`, want: Prompt{Tokens: [][]uint32{{1}, {2, 3}}}},
		{name: "negative token", in: `[1,-2]`, wantErr: true},
		{name: "empty list", in: `[]`, wantErr: true},
		{name: "number", in: `42`, wantErr: true},
		{name: "object", in: `{"a":1}`, wantErr: true},
		{name: "mixed", in: `["a",1]`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got Prompt
			err := json.Unmarshal([]byte(tt.in), &got)
			if (err != nil) != tt.wantErr {
				t.Fatalf("Unmarshal(%s) error = %v, wantErr %v", tt.in, err, tt.wantErr)
			}
			if !tt.wantErr && !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Unmarshal(%s) = %+v, want %+v", tt.in, got, tt.want)
			}
			if tt.wantErr {
				return
			}
			again, err := json.Marshal(got)
			if err != nil {
				t.Fatal(err)
			}
			var back Prompt
			if err := json.Unmarshal(again, &back); err != nil || !reflect.DeepEqual(back, got) {
				t.Fatalf("round trip: got %+v (%v), want %+v", back, err, got)
			}
		})
	}
}

func TestContentUnmarshal(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    Content
		wantErr bool
	}{
		{name: "string", in: `"hi"`, want: "hi"},
		{name: "null", in: `null`, want: ""},
		{name: "text parts", in: `[{"type":"text","text":"a"},{"type":"text","text":"b"}]`, want: "ab"},
		{name: "image part", in: `[{"type":"image_url","image_url":{"url":"x"}}]`, wantErr: true},
		{name: "number", in: `3`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got Content
			err := json.Unmarshal([]byte(tt.in), &got)
			if (err != nil) != tt.wantErr {
				t.Fatalf("error = %v, wantErr %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestStopUnmarshal(t *testing.T) {
	var s struct{ Stop Stop }
	if err := json.Unmarshal([]byte(`{"Stop":"x"}`), &s); err != nil || !reflect.DeepEqual(s.Stop, Stop{"x"}) {
		t.Fatalf("got %v, %v; want [x]", s.Stop, err)
	}
	if err := json.Unmarshal([]byte(`{"Stop":["x","y"]}`), &s); err != nil || !reflect.DeepEqual(s.Stop, Stop{"x", "y"}) {
		t.Fatalf("got %v, %v; want [x y]", s.Stop, err)
	}
	if err := json.Unmarshal([]byte(`{"Stop":5}`), &s); err == nil {
		t.Fatal("got nil error for numeric stop, want error")
	}
}
