package connserve

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func listen(t *testing.T) net.Listener {
	t.Helper()
	var lc net.ListenConfig
	ln, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

func TestShutdownClosesOpenConnections(t *testing.T) {
	ln := listen(t)
	ctx, cancel := context.WithCancel(t.Context())
	handled := make(chan struct{}, 2)
	done := make(chan error, 1)
	go func() {
		done <- Serve(ctx, ln, nil, func(c net.Conn) {
			handled <- struct{}{}
			_, _ = io.Copy(io.Discard, c) // blocks until the connection closes
		})
	}()
	var clients []net.Conn
	for range 2 {
		var d net.Dialer
		c, err := d.DialContext(t.Context(), "tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		clients = append(clients, c)
		<-handled
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve after shutdown: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return: a handler outlived the shutdown")
	}
	for i, c := range clients {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
			t.Errorf("client %d read %v after shutdown, want EOF", i, err)
		}
	}
}

func TestAcceptErrorIsReturned(t *testing.T) {
	ln := listen(t)
	_ = ln.Close()
	if err := Serve(t.Context(), ln, nil, func(net.Conn) {}); err == nil {
		t.Fatal("Serve on a closed listener returned nil")
	}
}

// tempErr is what accept(2) failing with EMFILE looks like to a caller: a
// net.Error whose Temporary is true.
type tempErr struct{}

func (tempErr) Error() string   { return "accept: too many open files" }
func (tempErr) Timeout() bool   { return false }
func (tempErr) Temporary() bool { return true }

// flakyListener fails its first n Accepts with err, then accepts for real.
type flakyListener struct {
	net.Listener
	n     int
	err   error
	fails int
}

func (l *flakyListener) Accept() (net.Conn, error) {
	if l.fails < l.n {
		l.fails++
		return nil, l.err
	}
	return l.Listener.Accept()
}

func TestAcceptRetriesTemporaryErrors(t *testing.T) {
	tests := []struct {
		name string
		err  error
	}{
		{"net.Error temporary", tempErr{}},
		{"EMFILE", &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}},
		{"ENFILE", &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.ENFILE)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ln := &flakyListener{Listener: listen(t), n: 4, err: tt.err}
			ctx, cancel := context.WithCancel(t.Context())
			handled := make(chan struct{}, 1)
			done := make(chan error, 1)
			go func() { done <- Serve(ctx, ln, nil, func(net.Conn) { handled <- struct{}{} }) }()
			var d net.Dialer
			c, err := d.DialContext(t.Context(), "tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			select {
			case <-handled:
			case err := <-done:
				t.Fatalf("Serve returned %v after a temporary accept error", err)
			case <-time.After(5 * time.Second):
				t.Fatal("connection not handled after the temporary errors")
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatalf("Serve after shutdown: %v", err)
			}
		})
	}
}

func TestBackoff(t *testing.T) {
	want := []int64{5, 10, 20, 40, 80, 160, 320, 640, 1000, 1000} // ms
	var d time.Duration
	for i, w := range want {
		d = nextBackoff(d)
		if d != time.Duration(w)*time.Millisecond {
			t.Fatalf("step %d: %v, want %d ms", i, d, w)
		}
	}
}

// TestPanicClosesOnlyItsConnection: a handler that panics is logged, its
// connection closed, and the server goes on accepting.
func TestPanicClosesOnlyItsConnection(t *testing.T) {
	ln := listen(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var logged bytes.Buffer
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(&lockedWriter{mu: &mu, w: &logged}, nil))
	done := make(chan error, 1)
	go func() {
		done <- Serve(ctx, ln, log, func(c net.Conn) {
			var b [1]byte
			if _, err := c.Read(b[:]); err == nil && b[0] == 'p' {
				panic("handler bug")
			}
			_, _ = c.Write([]byte("ok"))
		})
	}()
	dial := func(first byte) []byte {
		t.Helper()
		var d net.Dialer
		c, err := d.DialContext(t.Context(), "tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write([]byte{first}); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		got, err := io.ReadAll(c)
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		return got
	}
	if got := dial('p'); len(got) != 0 {
		t.Fatalf("panicking handler's client read %q, want a close", got)
	}
	if got := dial('x'); string(got) != "ok" {
		t.Fatalf("next connection read %q, want ok: the server stopped after a panic", got)
	}
	mu.Lock()
	out := logged.String()
	mu.Unlock()
	if !strings.Contains(out, "handler bug") || !strings.Contains(out, "goroutine") {
		t.Fatalf("panic not logged with its stack: %q", out)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
