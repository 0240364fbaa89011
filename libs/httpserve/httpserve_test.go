package httpserve

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"
)

func TestShutdownWaitsThenCuts(t *testing.T) {
	tests := []struct {
		name      string
		work      time.Duration
		grace     time.Duration
		wantFinal bool
	}{
		{"in-flight request finishes within grace", 50 * time.Millisecond, 5 * time.Second, true},
		{"request past grace is cut", 5 * time.Second, 50 * time.Millisecond, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			started := make(chan struct{})
			hs := New(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(200)
				w.(http.Flusher).Flush()
				close(started)
				select {
				case <-time.After(tt.work):
					_, _ = w.Write([]byte("done"))
				case <-r.Context().Done():
				}
			}), slog.New(slog.DiscardHandler))
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			go func() { _ = hs.Serve(ln) }()
			body := make(chan string, 1)
			go func() {
				resp, err := http.Get("http://" + ln.Addr().String())
				if err != nil {
					body <- ""
					return
				}
				defer resp.Body.Close()
				b := make([]byte, 16)
				n, _ := resp.Body.Read(b)
				body <- string(b[:n])
			}()
			<-started
			Shutdown(context.Background(), hs, tt.grace, slog.New(slog.DiscardHandler))
			got := <-body
			if (got == "done") != tt.wantFinal {
				t.Fatalf("client got %q, want finished=%v", got, tt.wantFinal)
			}
		})
	}
}
