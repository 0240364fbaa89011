package tokenizer

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warmpath/warmpath/libs/openai"
	"github.com/warmpath/warmpath/services/router/strategy"
)

// worker is a real HTTP server answering /tokenize like vLLM: one id per
// byte of the prompt, or per message.
func worker(t *testing.T, status int, delay time.Duration) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		time.Sleep(delay)
		var req openai.TokenizeRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || r.URL.Path != "/tokenize" {
			http.Error(w, "bad", http.StatusBadRequest)
			return
		}
		if status != http.StatusOK {
			openai.WriteError(w, openai.Errorf(status, "no"))
			return
		}
		var ids []uint32
		if req.Prompt != nil {
			for _, c := range []byte(*req.Prompt) {
				ids = append(ids, uint32(c))
			}
		}
		for range req.Messages {
			ids = append(ids, 7)
		}
		_ = json.NewEncoder(w).Encode(openai.TokenizeResponse{Count: len(ids), Tokens: ids})
	}))
	t.Cleanup(srv.Close)
	return srv, &calls
}

func TestTokenize(t *testing.T) {
	srv, calls := worker(t, http.StatusOK, 0)
	c, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	req := &strategy.Request{Model: "m", Prompt: "abc"}
	res, err := c.Tokenize(context.Background(), srv.URL, req)
	if err != nil || res.Cached || len(res.IDs) != 3 || res.IDs[0] != 'a' {
		t.Fatalf("ids %v cached %v err %v", res.IDs, res.Cached, err)
	}
	if res, _ = c.Tokenize(context.Background(), srv.URL, req); !res.Cached || calls.Load() != 1 {
		t.Fatalf("second call: cached %v after %d worker calls", res.Cached, calls.Load())
	}
	chat := &strategy.Request{Model: "m", Messages: []strategy.Message{{Role: "user", Content: "abc"}, {Role: "assistant", Content: "x"}}}
	if res, err := c.Tokenize(context.Background(), srv.URL, chat); err != nil || len(res.IDs) != 2 {
		t.Fatalf("chat: %v %v", res.IDs, err)
	}
	// The same text as a prompt and as chat are different requests.
	if k1, k2 := cacheKey(&strategy.Request{Model: "m", Prompt: "abc"}), cacheKey(&strategy.Request{Model: "m", Messages: []strategy.Message{{Role: "user", Content: "abc"}}}); k1 == k2 {
		t.Fatal("prompt and chat share a cache key")
	}
}

func TestTokenizeFailures(t *testing.T) {
	tests := []struct {
		name   string
		status int
		delay  time.Duration
	}{
		{"worker error", http.StatusInternalServerError, 0},
		{"slower than the timeout", http.StatusOK, 300 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, _ := worker(t, tt.status, tt.delay)
			c, _ := New(Config{Timeout: 50 * time.Millisecond})
			if _, err := c.Tokenize(context.Background(), srv.URL, &strategy.Request{Model: "m", Prompt: "x"}); err == nil {
				t.Fatal("no error")
			}
		})
	}
}

func TestLocal(t *testing.T) {
	if _, err := ParseLocal("m"); err == nil {
		t.Fatal("spec without an encoding accepted")
	}
	if _, err := ParseLocal("m=no_such_encoding"); err == nil {
		t.Fatal("unknown encoding accepted")
	}
	l, err := ParseLocal("m=cl100k_base, other=o200k_base")
	if err != nil {
		t.Fatal(err)
	}
	ids, ok, err := l.Encode("m", "hello world")
	if err != nil || !ok || len(ids) != 2 {
		t.Fatalf("ids %v ok %v err %v", ids, ok, err)
	}
	if _, ok, _ := l.Encode("unconfigured", "x"); ok {
		t.Fatal("a model without a local vocabulary was encoded")
	}
	// A configured model's completion prompt never reaches the worker.
	srv, calls := worker(t, http.StatusOK, 0)
	c, _ := New(Config{Local: l})
	if _, err := c.Tokenize(context.Background(), srv.URL, &strategy.Request{Model: "m", Prompt: "hello"}); err != nil || calls.Load() != 0 {
		t.Fatalf("err %v, %d worker calls", err, calls.Load())
	}
}
