package main

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/warmpath/warmpath/libs/lmproto"
	"github.com/warmpath/warmpath/libs/testnet"
)

// TestMaxConnections: past --max-connections an lm:// connection is not
// served (it waits in the backlog) until another closes.
func TestMaxConnections(t *testing.T) {
	lm, respAddr, httpAddr := testnet.FreeAddr(t), testnet.FreeAddr(t), testnet.FreeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--lm-listen", lm, "--resp-listen", respAddr, "--http-listen", httpAddr,
			"--max-connections", "2", "--log-level", "error"})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	readyz(t, httpAddr, func(code int) bool { return code == 200 })

	health, err := lmproto.AppendRequest(nil, &lmproto.RequestHeader{Command: lmproto.CmdHealth, Key: "health"})
	if err != nil {
		t.Fatal(err)
	}
	// ask sends HEALTH and waits up to d for the reply.
	ask := func(c net.Conn, d time.Duration) error {
		if _, err := c.Write(health); err != nil {
			return err
		}
		_ = c.SetReadDeadline(time.Now().Add(d))
		var reply [lmproto.ReplyHeaderSize]byte
		_, err := io.ReadFull(c, reply[:])
		return err
	}
	var conns []net.Conn
	for range 3 {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", lm)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns = append(conns, c)
	}
	for i, c := range conns[:2] {
		if err := ask(c, 5*time.Second); err != nil {
			t.Fatalf("connection %d, within the cap: %v", i, err)
		}
	}
	if err := ask(conns[2], 200*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("third connection over a cap of 2: %v, want no answer", err)
	}
	_ = conns[0].Close()
	var reply [lmproto.ReplyHeaderSize]byte
	_ = conns[2].SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(conns[2], reply[:]); err != nil {
		t.Fatalf("third connection once one closed: %v", err)
	}
}
