package discovery

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestStatic(t *testing.T) {
	tests := []struct {
		name    string
		urls    []string
		want    []string // reported URLs; nil when an error is wanted
		wantErr string
	}{
		{name: "one", urls: []string{"http://10.0.0.1:8000"}, want: []string{"http://10.0.0.1:8000"}},
		{
			name: "sorted and normalised",
			urls: []string{" HTTPS://Worker-B:443/ ", "http://worker-a:8000", "http://[FD00::1]:8000"},
			want: []string{"http://[fd00::1]:8000", "http://worker-a:8000", "https://worker-b:443"},
		},
		{name: "blank entries skipped", urls: []string{"", "http://a:1", "  "}, want: []string{"http://a:1"}},
		{name: "empty", urls: nil, wantErr: "empty static worker list"},
		{name: "only blanks", urls: []string{" ", ""}, wantErr: "empty static worker list"},
		{name: "duplicate", urls: []string{"http://a:1", "http://A:1/"}, wantErr: "listed twice"},
		{name: "no scheme", urls: []string{"10.0.0.1:8000"}, wantErr: "want http://host:port"},
		{name: "bad scheme", urls: []string{"ftp://a:21"}, wantErr: "want http://host:port"},
		{name: "no port", urls: []string{"http://a"}, wantErr: "want host:port"},
		{name: "empty host", urls: []string{"http://:8000"}, wantErr: "want host:port"},
		{name: "port zero", urls: []string{"http://a:0"}, wantErr: "out of range"},
		{name: "port too big", urls: []string{"http://a:65536"}, wantErr: "out of range"},
		{name: "path", urls: []string{"http://a:1/v1"}, wantErr: "without path"},
		{name: "query", urls: []string{"http://a:1?x=1"}, wantErr: "without path"},
		{name: "credentials", urls: []string{"http://u:p@a:1"}, wantErr: "credentials"},
		{name: "unparsable", urls: []string{"http://a:1/%zz"}, wantErr: "worker URL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src, err := Static(tt.urls)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Static(%q): got err %v, want one containing %q", tt.urls, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Static(%q): %v", tt.urls, err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			var calls [][]Target
			done := make(chan error, 1)
			go func() { done <- src.Run(ctx, func(ts []Target) { calls = append(calls, ts) }) }()
			select {
			case err := <-done:
				t.Fatalf("Run returned %v before its context ended", err)
			case <-time.After(50 * time.Millisecond):
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatalf("Run: got %v, want nil", err)
			}
			if len(calls) != 1 {
				t.Fatalf("got %d updates, want 1", len(calls))
			}
			if got := urlsOf(calls[0]); !slices.Equal(got, tt.want) {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestParseList(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []string
	}{
		{name: "empty", in: "", want: nil},
		{name: "one", in: "http://a:1", want: []string{"http://a:1"}},
		{name: "spaces and blanks", in: " http://a:1 ,, http://b:2 ,", want: []string{"http://a:1", "http://b:2"}},
		{name: "only commas", in: ", ,", want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ParseList(tt.in); !slices.Equal(got, tt.want) {
				t.Errorf("ParseList(%q): got %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

// urlsOf returns the targets' URLs in order.
func urlsOf(ts []Target) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.URL
	}
	return out
}
