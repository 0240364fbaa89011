package connserve

import (
	"context"
	"errors"
	"io"
	"net"
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
		done <- Serve(ctx, ln, func(c net.Conn) {
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
	if err := Serve(t.Context(), ln, func(net.Conn) {}); err == nil {
		t.Fatal("Serve on a closed listener returned nil")
	}
}
