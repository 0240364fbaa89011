package main

import (
	"bufio"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/warmpath/warmpath/libs/lmproto"
)

// TestHostileBytesStaySmall runs the server with a password and sends, to
// each protocol, a header announcing 256 MiB with (almost) nothing after
// it, on several connections held open. The process's heap must stay far
// below what was announced: pre-AUTH RESP is capped at Redis's 16 KiB a
// bulk string, and values (RESP after AUTH, lm:// PUT) are buffered only
// as their bytes arrive.
func TestHostileBytesStaySmall(t *testing.T) {
	const (
		password = "s3cret"
		conns    = 4
		limit    = 48 << 20 // the idle server's heap is a few MiB
	)
	dial := func(t *testing.T, addr string) net.Conn {
		t.Helper()
		var d net.Dialer
		c, err := d.DialContext(t.Context(), "tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	send := func(t *testing.T, c net.Conn, s string) {
		t.Helper()
		if _, err := io.WriteString(c, s); err != nil {
			t.Fatal(err)
		}
	}
	partial := strings.Repeat("x", 1<<10)
	lmPut, err := lmproto.AppendRequest(nil, &lmproto.RequestHeader{Command: lmproto.CmdPut, Meta: lmproto.Meta{Length: 256 << 20}, Key: "hostile"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		run  func(t *testing.T, p *proc)
	}{
		{"resp before AUTH", func(t *testing.T, p *proc) {
			for range conns {
				c := dial(t, p.resp)
				send(t, c, "*2\r\n$268435456\r\n") // the 19 bytes
				_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
				reply, err := io.ReadAll(c)
				if err != nil || !strings.HasPrefix(string(reply), "-ERR Protocol error: unauthenticated client") {
					t.Fatalf("reply %q, %v; want a protocol error and a close", reply, err)
				}
			}
		}},
		{"resp after AUTH", func(t *testing.T, p *proc) {
			for range conns {
				c := dial(t, p.resp)
				send(t, c, "*2\r\n$4\r\nAUTH\r\n$6\r\n"+password+"\r\n")
				_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
				if line, err := bufio.NewReader(c).ReadString('\n'); err != nil || line != "+OK\r\n" {
					t.Fatalf("AUTH: %q, %v", line, err)
				}
				send(t, c, "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$268435456\r\n"+partial)
			}
		}},
		{"lm PUT", func(t *testing.T, p *proc) {
			for range conns {
				send(t, dial(t, p.lm), string(lmPut)+partial)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// A process each, so one case's garbage is not the next's heap.
			p := startServer(t, []string{envPassword + "=" + password}, "--memory-capacity-bytes", "67108864", "--max-value-bytes", "268435456")
			tt.run(t, p)
			p.heapStaysUnder(t, limit, time.Second)
			if rss := p.rssBytes(t); rss > 128<<20 {
				t.Fatalf("RSS %d MiB after the hostile connections, want under 128 MiB", rss>>20)
			}
		})
	}
}
