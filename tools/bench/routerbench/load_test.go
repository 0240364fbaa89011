package routerbench

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestKeepTail(t *testing.T) {
	body := []byte("data: {\"x\":1}\n\ndata: [DONE]\n\n")
	for size := 1; size <= len(body); size++ {
		var tail [len("data: [DONE]\n\n")]byte
		for off := 0; off < len(body); off += size {
			keepTail(tail[:], body[off:min(off+size, len(body))])
		}
		if got := string(tail[:]); got != string(doneTail) {
			t.Errorf("reads of %d bytes: tail %q, want %q", size, got, doneTail)
		}
	}
}

func TestTargetDo(t *testing.T) {
	up := httptest.NewServer(NewUpstream("bench-model", 8))
	t.Cleanup(up.Close)
	truncated := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("data: {}\n\n")) // no [DONE]
	}))
	t.Cleanup(truncated.Close)
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "over capacity", http.StatusTooManyRequests)
	}))
	t.Cleanup(failing.Close)

	tests := []struct {
		name    string
		url     string
		body    string
		stream  bool
		wantErr string
	}{
		{name: "plain", url: up.URL, body: `{"model":"bench-model"}`},
		{name: "stream", url: up.URL, body: `{"model":"bench-model","stream":true}`, stream: true},
		{name: "stream without done", url: truncated.URL, body: `{}`, stream: true, wantErr: "[DONE]"},
		{name: "status", url: failing.URL, body: `{}`, wantErr: "status 429: over capacity"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tg := NewTarget("t", 1, 5*time.Second, tt.url)
			defer tg.Close()
			s, err := tg.do(context.Background(), 0, []byte(tt.body), tt.stream)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.ttfb <= 0 || s.total < s.ttfb {
				t.Errorf("got ttfb %v total %v, want 0 < ttfb <= total", s.ttfb, s.total)
			}
		})
	}
}

func TestRunCountAndFor(t *testing.T) {
	srv := httptest.NewServer(NewUpstream("bench-model", 2))
	t.Cleanup(srv.Close)
	tg := NewTarget("direct", 4, 5*time.Second, srv.URL)
	defer tg.Close()
	l := load{target: tg, bodies: [][]byte{[]byte(`{"stream":true}`)}, stream: true, concurrency: 3}

	st := runCount(context.Background(), l, 50).step(l)
	if st.Requests != 50 || st.Errors != 0 || st.Latency.Count != 50 || st.TTFB == nil || st.TTFB.Count != 50 {
		t.Errorf("runCount: got %+v, want 50 requests with latencies and TTFBs", st)
	}
	st = runFor(context.Background(), l, 10*time.Millisecond, 100*time.Millisecond).step(l)
	if st.Requests == 0 || st.Errors != 0 || st.Seconds != 0.1 || st.RPS <= 0 {
		t.Errorf("runFor: got %+v, want requests over 0.1 s", st)
	}
}
