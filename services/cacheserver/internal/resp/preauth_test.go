package resp

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"
)

// TestPreAuthLimits: until AUTH, a command is capped at 10 arguments of
// 16 KiB (Redis's limits since CVE-2021-32675); over them the client gets
// a protocol error and a closed connection. After AUTH the configured
// limits apply.
func TestPreAuthLimits(t *testing.T) {
	addr, mem := start(t, Config{Password: "s3cret", Limits: Limits{MaxArgBytes: 1 << 20}})
	tests := []struct {
		name, in, want string
	}{
		{"11 arguments", "*11\r\n", "-ERR Protocol error: unauthenticated client"},
		{"256 MiB bulk", "*2\r\n$268435456\r\n", "-ERR Protocol error: unauthenticated client"},
		{"16 KiB + 1", "*2\r\n$16385\r\n", "-ERR Protocol error: unauthenticated client"},
		{"long inline", strings.Repeat("x", 20<<10) + "\r\n", "-ERR Protocol error: unauthenticated client"},
		{"within the limits", "*2\r\n$3\r\nGET\r\n$16384\r\n" + strings.Repeat("k", 16<<10) + "\r\n", "-NOAUTH"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := dialRaw(t, addr)
			if _, err := io.WriteString(c.conn, tt.in); err != nil {
				t.Fatal(err)
			}
			_ = c.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			line, err := c.br.ReadString('\n')
			if err != nil || !strings.HasPrefix(line, tt.want) {
				t.Fatalf("reply %q, %v; want %q...", line, err, tt.want)
			}
			if strings.HasPrefix(tt.want, "-ERR Protocol error") {
				if rest, err := io.ReadAll(c.br); err != nil || len(rest) != 0 {
					t.Fatalf("after the error: %q, %v; want a closed connection", rest, err)
				}
			}
		})
	}
	t.Run("after AUTH", func(t *testing.T) {
		c := dialRaw(t, addr)
		if r, err := c.do([]byte("AUTH"), []byte("s3cret")); err != nil || string(r) != "+OK" {
			t.Fatalf("AUTH: %q, %v", r, err)
		}
		big := bytes.Repeat([]byte{1}, 512<<10)
		if r, err := c.do([]byte("SET"), []byte("k"), big); err != nil || string(r) != "+OK" {
			t.Fatalf("SET of 512 KiB after AUTH: %q, %v", r, err)
		}
		keys := [][]byte{[]byte("MGET")}
		for range 20 {
			keys = append(keys, []byte("k"))
		}
		if r, err := c.do(keys...); err != nil || string(r) != "*20" {
			t.Fatalf("MGET of 20 keys after AUTH: %q, %v", r, err)
		}
	})
	if obj, ok := mem.Get("k"); !ok || len(obj.Value) != 512<<10 {
		t.Fatal("the authenticated SET was not stored")
	}
}

// TestKeyLength: a key the disk tier cannot store (over 65,535 bytes) is
// refused by SET with an error, whether or not a disk tier is configured,
// so a key's fate does not depend on whether it is evicted to disk.
func TestKeyLength(t *testing.T) {
	addr, mem := start(t, Config{})
	tests := []struct {
		name   string
		keyLen int
		want   string
	}{
		{"at the limit", 65535, "+OK"},
		{"one over", 65536, "-ERR key of 65536 bytes"},
		{"far over", 1 << 20, "-ERR key of 1048576 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := dialRaw(t, addr)
			key := bytes.Repeat([]byte{'k'}, tt.keyLen)
			r, err := c.do([]byte("SET"), key, []byte("v"))
			if err != nil || !strings.HasPrefix(string(r), tt.want) {
				t.Fatalf("SET: %q, %v; want %q...", r, err, tt.want)
			}
			if stored := mem.Contains(string(key)); stored != (tt.want == "+OK") {
				t.Fatalf("stored: %v", stored)
			}
			if r, err := c.do([]byte("PING")); err != nil || string(r) != "+PONG" {
				t.Fatalf("connection unusable after the refusal: %q, %v", r, err)
			}
		})
	}
}
