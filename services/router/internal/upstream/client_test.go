package upstream

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// countingServer is an httptest server that counts the connections it
// accepted, to tell pooled reuse from fresh dials.
type countingServer struct {
	*httptest.Server
	conns atomic.Int64
}

func newCountingServer(t *testing.T, h http.HandlerFunc) *countingServer {
	t.Helper()
	cs := &countingServer{}
	cs.Server = httptest.NewUnstartedServer(h)
	cs.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			cs.conns.Add(1)
		}
	}
	cs.Start()
	t.Cleanup(cs.Close)
	return cs
}

func mustTarget(t *testing.T, raw string) Target {
	t.Helper()
	tg, err := ParseTarget(raw)
	if err != nil {
		t.Fatal(err)
	}
	return tg
}

func readAll(t *testing.T, resp *Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	if err := resp.Body.Close(); err != nil {
		t.Fatalf("close body: %v", err)
	}
	return string(b)
}

func TestFramingsAndReuse(t *testing.T) {
	tests := []struct {
		name      string
		handler   http.HandlerFunc
		want      string
		wantConns int64 // after two requests
	}{
		{
			name: "content-length",
			handler: func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Length", "5")
				_, _ = w.Write([]byte("hello"))
			},
			want: "hello", wantConns: 1,
		},
		{
			name: "chunked",
			handler: func(w http.ResponseWriter, _ *http.Request) {
				for _, s := range []string{"data: a\n\n", "data: b\n\n"} {
					_, _ = w.Write([]byte(s))
					w.(http.Flusher).Flush()
				}
			},
			want: "data: a\n\ndata: b\n\n", wantConns: 1,
		},
		{
			name: "connection close",
			handler: func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Connection", "close")
				_, _ = w.Write([]byte("bye"))
			},
			want: "bye", wantConns: 2,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newCountingServer(t, tt.handler)
			c := New(Config{})
			for i := range 2 {
				resp, err := c.Do(context.Background(), mustTarget(t, srv.URL), &Request{Method: "POST", URI: "/x", Body: []byte("{}")})
				if err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
				if got := readAll(t, resp); got != tt.want {
					t.Fatalf("request %d: body %q, want %q", i, got, tt.want)
				}
			}
			if got := srv.conns.Load(); got != tt.wantConns {
				t.Errorf("connections = %d, want %d", got, tt.wantConns)
			}
		})
	}
}

func TestRequestOnTheWire(t *testing.T) {
	got := make(chan *http.Request, 1)
	bodies := make(chan string, 1)
	srv := newCountingServer(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- r
		bodies <- string(b)
	})
	c := New(Config{})
	h := http.Header{}
	h.Set("Authorization", "Bearer k")
	h.Set("X-Request-Id", "r1")
	// A value with a line break would smuggle a second request onto the
	// connection; it must not be written.
	h["X-Evil"] = []string{"a\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"}
	h["Bad Name"] = []string{"v"}
	resp, err := c.Do(context.Background(), mustTarget(t, srv.URL+"/prefix"), &Request{
		Method: "POST", URI: "/v1/completions?a=1", Header: h, Body: []byte(`{"model":"m"}`),
	})
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	r := <-got
	if r.URL.RequestURI() != "/prefix/v1/completions?a=1" {
		t.Errorf("request URI %q", r.URL.RequestURI())
	}
	if r.Header.Get("Authorization") != "Bearer k" || r.Header.Get("X-Request-Id") != "r1" {
		t.Errorf("headers not forwarded: %v", r.Header)
	}
	if r.Header.Get("X-Evil") != "" || r.Header.Get("Bad Name") != "" {
		t.Errorf("invalid header forwarded: %v", r.Header)
	}
	if r.ContentLength != 13 || <-bodies != `{"model":"m"}` {
		t.Errorf("body not forwarded intact (content-length %d)", r.ContentLength)
	}
	if srv.conns.Load() != 1 {
		t.Errorf("connections = %d, want 1", srv.conns.Load())
	}
}

func TestTimeoutsAndCancel(t *testing.T) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	srv := newCountingServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/midbody" {
			_, _ = w.Write([]byte("first"))
			w.(http.Flusher).Flush()
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	c := New(Config{})
	tg := mustTarget(t, srv.URL)

	t.Run("head timeout", func(t *testing.T) {
		_, err := c.Do(context.Background(), tg, &Request{Method: "POST", URI: "/stall", HeadTimeout: 50 * time.Millisecond})
		if !errors.Is(err, ErrTimeout) {
			t.Fatalf("err = %v, want ErrTimeout", err)
		}
	})
	t.Run("read timeout mid-body", func(t *testing.T) {
		resp, err := c.Do(context.Background(), tg, &Request{Method: "POST", URI: "/midbody", ReadTimeout: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if !errors.Is(err, ErrTimeout) || string(b) != "first" {
			t.Fatalf("read %q, err = %v; want \"first\" then ErrTimeout", b, err)
		}
	})
	t.Run("context cancel while waiting for the head", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(50*time.Millisecond, cancel)
		_, err := c.Do(ctx, tg, &Request{Method: "POST", URI: "/stall"})
		if !errors.Is(err, context.Canceled) || errors.Is(err, ErrTimeout) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
	})
	t.Run("context cancel mid-body", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		resp, err := c.Do(ctx, tg, &Request{Method: "POST", URI: "/midbody"})
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		time.AfterFunc(50*time.Millisecond, cancel)
		_, err = io.ReadAll(resp.Body)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
	})
}

func TestDialError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	_, err = New(Config{}).Do(context.Background(), mustTarget(t, "http://"+addr), &Request{Method: "POST", URI: "/"})
	var opErr *net.OpError
	if !errors.As(err, &opErr) || opErr.Op != "dial" {
		t.Fatalf("err = %v, want a *net.OpError with Op dial", err)
	}
}

// TestStalePooledConnection: a worker that closes a kept-alive connection
// while it sits in the pool costs the caller nothing — the request goes
// again on a fresh connection.
func TestStalePooledConnection(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	var accepted atomic.Int64
	closed := make(chan struct{}, 16) // one per connection the server closed
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			go func() {
				defer func() { closed <- struct{}{} }()
				defer nc.Close()
				br := bufio.NewReader(nc)
				req, err := http.ReadRequest(br)
				if err != nil {
					return
				}
				_, _ = io.Copy(io.Discard, req.Body)
				// Answer keep-alive, then close anyway: what a worker whose
				// keep-alive timer fires does.
				_, _ = io.WriteString(nc, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
			}()
		}
	}()
	c := New(Config{})
	tg := mustTarget(t, "http://"+ln.Addr().String())
	for i := range 3 {
		resp, err := c.Do(context.Background(), tg, &Request{Method: "POST", URI: "/", Body: []byte("x")})
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if got := readAll(t, resp); got != "ok" {
			t.Fatalf("request %d: body %q", i, got)
		}
		select { // the server has closed the connection now in the pool
		case <-closed:
		case <-time.After(5 * time.Second):
			t.Fatalf("request %d: the server did not close its connection", i)
		}
	}
	if accepted.Load() < 3 {
		t.Errorf("accepted %d connections, want one per request", accepted.Load())
	}
}

func TestCloseBeforeEndDoesNotPool(t *testing.T) {
	srv := newCountingServer(t, func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(strings.Repeat("x", 1<<20)))
	})
	c := New(Config{})
	tg := mustTarget(t, srv.URL)
	resp, err := c.Do(context.Background(), tg, &Request{Method: "POST", URI: "/"})
	if err != nil {
		t.Fatal(err)
	}
	_, _ = resp.Body.Read(make([]byte, 10))
	_ = resp.Body.Close()
	resp, err = c.Do(context.Background(), tg, &Request{Method: "POST", URI: "/"})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(readAll(t, resp)); n != 1<<20 {
		t.Fatalf("body %d bytes", n)
	}
	if got := srv.conns.Load(); got != 2 {
		t.Errorf("connections = %d, want 2 (a half-read response must not be reused)", got)
	}
	c.CloseIdle(tg.Addr)
}

func TestParseTarget(t *testing.T) {
	tests := []struct {
		in      string
		want    Target
		wantErr bool
	}{
		{in: "http://10.0.0.1:8000", want: Target{Addr: "10.0.0.1:8000", Host: "10.0.0.1:8000"}},
		{in: "http://worker", want: Target{Addr: "worker:80", Host: "worker"}},
		{in: "https://worker/base/", want: Target{Addr: "worker:443", Host: "worker", TLS: true, Prefix: "/base"}},
		{in: "http://[::1]:9000", want: Target{Addr: "[::1]:9000", Host: "[::1]:9000"}},
		{in: "ftp://worker", wantErr: true},
		{in: "http://", wantErr: true},
		{in: "http://u:p@worker", wantErr: true},
		{in: "http://worker?q=1", wantErr: true},
	}
	for _, tt := range tests {
		got, err := ParseTarget(tt.in)
		if (err != nil) != tt.wantErr {
			t.Errorf("ParseTarget(%q) err = %v, wantErr %v", tt.in, err, tt.wantErr)
			continue
		}
		if !tt.wantErr && got != tt.want {
			t.Errorf("ParseTarget(%q) = %+v, want %+v", tt.in, got, tt.want)
		}
	}
}

// FuzzResponse feeds arbitrary bytes as a worker's answer: the client must
// return a response or an error, never panic or hang, and a body it hands
// out must read to an end.
func FuzzResponse(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
		"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\nshort",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
		"HTTP/1.0 500 x\r\n\r\nclose-delimited",
		"garbage",
		"",
	} {
		f.Add([]byte(s))
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = ln.Close() })
	answers := make(chan []byte)
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			answer := <-answers
			go func() {
				defer nc.Close()
				if _, err := http.ReadRequest(bufio.NewReader(nc)); err != nil {
					return
				}
				_, _ = nc.Write(answer)
			}()
		}
	}()
	tg := mustTargetF(f, "http://"+ln.Addr().String())
	f.Fuzz(func(t *testing.T, answer []byte) {
		// A fresh client per input: each answer gets its own connection.
		c := New(Config{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			answers <- answer
		}()
		resp, err := c.Do(context.Background(), tg, &Request{Method: "POST", URI: "/", Body: []byte("{}"),
			HeadTimeout: time.Second, ReadTimeout: time.Second})
		<-done
		if err != nil {
			return
		}
		if resp.StatusCode < 100 || resp.StatusCode > 999 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		c.CloseIdle(tg.Addr)
	})
}

func mustTargetF(f *testing.F, raw string) Target {
	tg, err := ParseTarget(raw)
	if err != nil {
		f.Fatal(err)
	}
	return tg
}
