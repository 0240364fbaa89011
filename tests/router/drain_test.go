package router

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/warmpath/warmpath/libs/testwait"
)

// TestSIGTERMDrains stops the router as a rolling update does. Before
// SIGTERM nothing tells kube-proxy or an ingress that the pod is leaving,
// and they keep sending it new connections for a moment: the router must
// still accept them. So on SIGTERM it fails /ready at once, keeps serving
// for --drain-delay with every response closing its connection (clients on
// kept-alive connections move to another replica), then stops accepting
// and lets what is in flight finish within --shutdown-grace.
func TestSIGTERMDrains(t *testing.T) {
	const drain = 2 * time.Second
	tests := []struct {
		name   string
		stream bool
		done   func([]byte) bool // the whole answer arrived
	}{
		{"non-streamed request in flight", false, func(b []byte) bool { return bytes.Contains(b, []byte(`"finish_reason":"length"`)) }},
		{"stream in flight", true, func(b []byte) bool { return bytes.Contains(b, []byte("[DONE]")) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Slowed down so that 300 tokens outlast the drain delay.
			w := startWorker(t, "--time-scale", "0.5")
			r := startRouter(t, []*worker{w}, "--drain-delay", drain.String(), "--shutdown-grace", "20s")
			fresh := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
			// A client holding a kept-alive connection from before SIGTERM.
			kept := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}, Timeout: 5 * time.Second}
			if st, closed, err := get(kept, r.url+"/health"); err != nil || st != http.StatusOK || closed {
				t.Fatalf("before SIGTERM: /health %d (connection closed %v), %v", st, closed, err)
			}

			type result struct {
				status int
				body   []byte
				err    error
			}
			inFlight := make(chan result, 1)
			go func() {
				resp, err := http.Post(r.url+"/v1/completions", "application/json", strings.NewReader(
					fmt.Sprintf(`{"model":%q,"prompt":"finish me","max_tokens":300,"stream":%v}`, simModel, tt.stream)))
				if err != nil {
					inFlight <- result{err: err}
					return
				}
				defer resp.Body.Close()
				b, err := io.ReadAll(resp.Body)
				inFlight <- result{resp.StatusCode, b, err}
			}()
			testwait.For(t, 5*time.Second, "the request in flight at the worker", func() bool { return r.endpoint(t, w.url).InFlight > 0 })

			if err := r.proc.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			sent := time.Now()
			testwait.For(t, drain/2, "/ready 503 after SIGTERM", func() bool {
				st, _, err := get(fresh, r.url+"/ready")
				return err == nil && st == http.StatusServiceUnavailable
			})
			// Draining is not dying: the kubelet must not restart it.
			if st, _, err := get(fresh, r.url+"/health"); err != nil || st != http.StatusOK {
				t.Errorf("draining: /health %d, %v, want 200", st, err)
			}
			// Still served, and told to go elsewhere next time.
			if st, closed, err := get(kept, r.url+"/v1/models"); err != nil || st != http.StatusOK || !closed {
				t.Errorf("draining, kept-alive connection: /v1/models %d (connection closed %v), %v; want 200 closing the connection", st, closed, err)
			}
			resp, err := fresh.Post(r.url+"/v1/completions", "application/json",
				strings.NewReader(fmt.Sprintf(`{"model":%q,"prompt":"a newcomer","max_tokens":2}`, simModel)))
			if err != nil {
				t.Fatalf("draining: a new connection was refused %s after SIGTERM: %v", time.Since(sent).Round(time.Millisecond), err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || !resp.Close {
				t.Errorf("draining, new connection: completion %d (connection closed %v), want 200 closing the connection", resp.StatusCode, resp.Close)
			}

			got := <-inFlight
			if got.err != nil || got.status != http.StatusOK || !tt.done(got.body) {
				t.Fatalf("the request in flight at SIGTERM: %d, %v, body %.300s", got.status, got.err, got.body)
			}
			select {
			case <-r.proc.Done():
			case <-time.After(15 * time.Second):
				t.Fatal("router still running 15s after SIGTERM")
			}
			if err := r.proc.Wait(); err != nil {
				t.Errorf("router exit: %v", err)
			}
			if took := time.Since(sent); took < drain {
				t.Errorf("router exited %s after SIGTERM, before its %s drain delay", took, drain)
			}
			if _, _, err := get(fresh, r.url+"/health"); err == nil {
				t.Error("router still accepts connections after it exited")
			}
		})
	}
}

// get GETs url and says whether the server closed the connection after it.
func get(c *http.Client, url string) (status int, closed bool, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, false, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, false, err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil && !errors.Is(err, io.EOF) {
		return 0, false, err
	}
	return resp.StatusCode, resp.Close, nil
}
