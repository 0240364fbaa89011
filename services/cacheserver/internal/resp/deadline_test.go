package resp

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// rawClient speaks RESP over a plain connection, so nothing retries on
// the test's behalf (go-redis reconnects after an EOF).
type rawClient struct {
	t    *testing.T
	conn net.Conn
	br   *bufio.Reader
}

func dialRaw(t *testing.T, addr string) *rawClient {
	t.Helper()
	var d net.Dialer
	conn, err := d.DialContext(t.Context(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &rawClient{t: t, conn: conn, br: bufio.NewReader(conn)}
}

// do sends one command and returns its reply: a status or error line, or
// a bulk string's bytes.
func (c *rawClient) do(args ...[]byte) ([]byte, error) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	_ = c.conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.conn.Write(b.Bytes()); err != nil {
		return nil, fmt.Errorf("write: %w", err)
	}
	line, err := c.br.ReadString('\n')
	if err != nil {
		return nil, fmt.Errorf("read reply: %w", err)
	}
	line = strings.TrimSuffix(line, "\r\n")
	if !strings.HasPrefix(line, "$") || line == "$-1" {
		return []byte(line), nil
	}
	var n int
	if _, err := fmt.Sscanf(line, "$%d", &n); err != nil {
		return nil, fmt.Errorf("bulk length %q: %w", line, err)
	}
	val := make([]byte, n+2)
	if _, err := io.ReadFull(c.br, val); err != nil {
		return nil, fmt.Errorf("read bulk: %w", err)
	}
	return val[:n], nil
}

// TestIdleAfterLargeReply: a reply over the 64 KiB write buffer goes
// straight to the socket; it must be written under a deadline armed for
// its own command, not one left from an earlier reply, or the first large
// GET after an idle spell longer than the I/O timeout fails.
func TestIdleAfterLargeReply(t *testing.T) {
	const ioTimeout = 100 * time.Millisecond
	addr, _ := start(t, Config{IOTimeout: ioTimeout, IdleTimeout: time.Minute})
	c := dialRaw(t, addr)
	big := bytes.Repeat([]byte{0x5A}, 1<<20)
	if r, err := c.do([]byte("SET"), []byte("k"), big); err != nil || string(r) != "+OK" {
		t.Fatalf("SET: %q, %v", r, err)
	}
	for i := range 3 {
		got, err := c.do([]byte("GET"), []byte("k"))
		if err != nil || !bytes.Equal(got, big) {
			t.Fatalf("GET %d: %d bytes, %v", i, len(got), err)
		}
		// Idle past the I/O timeout (not below the idle timeout): this
		// wait is the scenario itself, not synchronisation.
		time.Sleep(3 * ioTimeout)
	}
}
