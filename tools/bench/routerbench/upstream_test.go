package routerbench

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/warmpath/warmpath/libs/openai"
)

func TestUpstream(t *testing.T) {
	srv := httptest.NewServer(NewUpstream("bench-model", 3))
	t.Cleanup(srv.Close)
	tests := []struct {
		name, method, path, body string
		wantType                 string
		check                    func(t *testing.T, body []byte)
	}{
		{name: "health", method: "GET", path: "/health"},
		{name: "models", method: "GET", path: "/v1/models", wantType: "application/json",
			check: func(t *testing.T, body []byte) {
				var got openai.ModelList
				if err := json.Unmarshal(body, &got); err != nil {
					t.Fatal(err)
				}
				if got.Object != "list" || len(got.Data) != 1 || got.Data[0].ID != "bench-model" ||
					got.Data[0].Object != "model" || got.Data[0].OwnedBy != "vllm" {
					t.Errorf("got %+v, want one bench-model owned by vllm", got)
				}
			}},
		{name: "metrics", method: "GET", path: "/metrics", wantType: "text/plain; version=0.0.4; charset=utf-8",
			check: func(t *testing.T, body []byte) {
				for _, want := range []string{
					`vllm:num_requests_running{engine="0",model_name="bench-model"} 0`,
					`vllm:num_requests_waiting{engine="0",model_name="bench-model"} 0`,
					`vllm:kv_cache_usage_perc{engine="0",model_name="bench-model"} 0`,
					`vllm:cache_config_info{block_size="16",num_gpu_blocks="10000"} 1`,
				} {
					if !bytes.Contains(body, []byte(want)) {
						t.Errorf("metrics lack %q:\n%s", want, body)
					}
				}
			}},
		{name: "completion", method: "POST", path: "/v1/completions",
			body: `{"model":"bench-model","prompt":"hi","max_tokens":16}`, wantType: "application/json",
			check: func(t *testing.T, body []byte) {
				var got openai.CompletionResponse
				if err := json.Unmarshal(body, &got); err != nil {
					t.Fatal(err)
				}
				if got.Object != "text_completion" || got.Model != "bench-model" || len(got.Choices) != 1 {
					t.Errorf("got %+v, want one text_completion choice", got)
				}
			}},
		{name: "stream", method: "POST", path: "/v1/completions",
			body: `{"model":"bench-model","prompt":"hi","stream": true}`, wantType: "text/event-stream; charset=utf-8",
			check: func(t *testing.T, body []byte) {
				r := openai.NewSSEReader(bytes.NewReader(body))
				var events []string
				for {
					ev, err := r.Next()
					if err == io.EOF {
						break
					}
					if err != nil {
						t.Fatal(err)
					}
					events = append(events, string(ev))
				}
				if len(events) != 4 || events[3] != openai.DoneData {
					t.Fatalf("got %d events ending %q, want 3 chunks and [DONE]", len(events), events[len(events)-1])
				}
				var chunk openai.CompletionResponse
				if err := json.Unmarshal([]byte(events[2]), &chunk); err != nil {
					t.Fatal(err)
				}
				if fr := chunk.Choices[0].FinishReason; fr == nil || *fr != "length" {
					t.Errorf("last chunk finish_reason = %v, want length", fr)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest(tt.method, srv.URL+tt.path, strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d, want 200: %s", resp.StatusCode, body)
			}
			if got := resp.Header.Get("Content-Type"); tt.wantType != "" && got != tt.wantType {
				t.Errorf("Content-Type %q, want %q", got, tt.wantType)
			}
			if tt.check != nil {
				tt.check(t, body)
			}
		})
	}
}

func TestStreamRequested(t *testing.T) {
	tests := []struct {
		name, body string
		want       bool
	}{
		{"absent", `{"model":"m","prompt":"p"}`, false},
		{"true", `{"model":"m","stream":true}`, true},
		{"spaced", "{\"stream\" :\n true}", true},
		{"false", `{"stream":false}`, false},
		{"stream_options only", `{"stream_options":{"include_usage":true}}`, false},
		{"escaped inside prompt", `{"prompt":"say \"stream\":true","stream":false}`, false},
		{"escaped then real", `{"prompt":"\"stream\":false","stream":true}`, true},
		{"key without colon", `{"prompt":"x","tags":["stream"],"stream":true}`, true},
		{"empty", ``, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := streamRequested([]byte(tt.body)); got != tt.want {
				t.Errorf("streamRequested(%s) = %v, want %v", tt.body, got, tt.want)
			}
		})
	}
}
