package lmproto

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// le is one little-endian int32 as on the wire.
func le(v int32) string {
	return string(binary.LittleEndian.AppendUint32(nil, uint32(v)))
}

// The fixtures are written from the reference layout (lmcache/server:
// nine int32 then the 150-byte space-padded key; reply: nine int32 with
// location last), not from this package's encoder.
var (
	putFixture = le(1) + le(4) + le(2) + le(3) + le(1) + le(2) + le(16) + le(8) + le(128) +
		"model@1@0@abc@bfloat16" + strings.Repeat(" ", 150-len("model@1@0@abc@bfloat16"))
	replyFixture = le(200) + le(4) + le(2) + le(3) + le(2) + le(16) + le(8) + le(128) + le(1)
)

func TestRequestConformance(t *testing.T) {
	h := RequestHeader{Command: CmdPut, Meta: Meta{Length: 4, Fmt: 2, Dtype: 3, Location: 1, Shape: [4]int32{2, 16, 8, 128}}, Key: "model@1@0@abc@bfloat16"}
	got, err := AppendRequest(nil, &h)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != RequestHeaderSize || string(got) != putFixture {
		t.Fatalf("encoded request differs from the reference layout:\n got %x\nwant %x", got, putFixture)
	}
	back, err := ParseRequest([]byte(putFixture))
	if err != nil || back != h {
		t.Fatalf("parsed %+v (%v), want %+v", back, err, h)
	}
	// The reference server trims spaces and NULs.
	nul := []byte(putFixture)
	for i := 36 + len(h.Key); i < RequestHeaderSize; i++ {
		nul[i] = 0
	}
	if back, err := ParseRequest(nul); err != nil || back.Key != h.Key {
		t.Fatalf("NUL-padded key: %q %v", back.Key, err)
	}
}

func TestReplyConformance(t *testing.T) {
	r := ReplyHeader{Code: CodeSuccess, Meta: Meta{Length: 4, Fmt: 2, Dtype: 3, Location: 1, Shape: [4]int32{2, 16, 8, 128}}}
	if got := AppendReply(nil, &r); string(got) != replyFixture {
		t.Fatalf("encoded reply differs from the reference layout:\n got %x\nwant %x", got, replyFixture)
	}
	if back, err := ParseReply([]byte(replyFixture)); err != nil || back != r {
		t.Fatalf("parsed %+v (%v)", back, err)
	}
}

func TestKeys(t *testing.T) {
	for _, tt := range []struct {
		key string
		ok  bool
	}{
		{"k", true}, {strings.Repeat("k", 150), true}, {"", false}, {strings.Repeat("k", 151), false}, {"k ", false}, {"k\x00", false},
	} {
		if err := ValidKey(tt.key); (err == nil) != tt.ok {
			t.Errorf("ValidKey(%q) = %v, want ok=%v", tt.key, err, tt.ok)
		}
	}
}

func TestReaderRejects(t *testing.T) {
	hdr := func(cmd, length int32, key string) string {
		h := le(cmd) + le(length) + strings.Repeat(le(0), 7) + key
		return h + strings.Repeat(" ", RequestHeaderSize-len(h))
	}
	tests := []struct {
		name string
		in   string
		want error
	}{
		{"clean end", "", io.EOF},
		{"truncated header", hdr(CmdGet, 0, "k")[:100], ErrProtocol},
		{"unknown command", hdr(9, 0, "k"), ErrProtocol},
		{"negative length", hdr(CmdPut, -1, "k"), ErrProtocol},
		{"value over the limit", hdr(CmdPut, 1<<20+1, "k"), ErrProtocol},
		{"truncated value", hdr(CmdPut, 10, "k") + "short", ErrProtocol},
		{"empty key", hdr(CmdGet, 0, ""), ErrProtocol},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewReader(strings.NewReader(tt.in), 1<<20).Next()
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
		})
	}
}

// TestHealthAnyKey: the reference server (lmcache/v1/server/__main__.py,
// LMCache e33d0c81d3c44ba339c5282fd3f1f116eaac3403) answers CLIENT_HEALTH
// without looking at the key, so a HEALTH whose key is empty, all spaces
// or all NULs is a request, not a protocol error. Keys still matter, and
// are still required, for the other commands.
func TestHealthAnyKey(t *testing.T) {
	hdr := func(cmd int32, key string) string {
		return le(cmd) + strings.Repeat(le(0), 8) + key
	}
	tests := []struct {
		name, in, key string
	}{
		{"spaces", hdr(CmdHealth, strings.Repeat(" ", KeySize)), ""},
		{"NULs", hdr(CmdHealth, strings.Repeat("\x00", KeySize)), ""},
		{"a key", hdr(CmdHealth, "health"+strings.Repeat(" ", KeySize-6)), "health"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rd := NewReader(strings.NewReader(tt.in+tt.in), 1<<20)
			for i := range 2 { // the stream stays framed after it
				req, err := rd.Next()
				if err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
				if req.Command != CmdHealth || req.Key != tt.key {
					t.Fatalf("request %d: command %d key %q", i, req.Command, req.Key)
				}
			}
		})
	}
}

// serve is a minimal lm:// server over this package's codec: what a
// client test needs, and what the cache server builds on.
func serve(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	var mu sync.Mutex
	store := map[string]Request{}
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				rd := NewReader(conn, 1<<20)
				for {
					req, err := rd.Next()
					if err != nil {
						return
					}
					mu.Lock()
					stored, ok := store[req.Key]
					switch req.Command {
					case CmdPut:
						store[req.Key] = *req
					case CmdDelete:
						delete(store, req.Key)
					}
					mu.Unlock()
					var out []byte
					switch req.Command {
					case CmdGet:
						if !ok {
							out = AppendReply(nil, &ReplyHeader{Code: CodeFail})
						} else {
							out = append(AppendReply(nil, &ReplyHeader{Code: CodeSuccess, Meta: stored.Meta}), stored.Value...)
						}
					case CmdExist, CmdDelete:
						code := CodeFail
						if ok {
							code = CodeSuccess
						}
						out = AppendReply(nil, &ReplyHeader{Code: code})
					case CmdHealth:
						out = AppendReply(nil, &ReplyHeader{Code: CodeSuccess})
					}
					if _, err := conn.Write(out); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

func TestClient(t *testing.T) {
	c := Dial(serve(t), time.Second, 0)
	defer c.Close()
	ctx := context.Background()
	if err := c.Health(ctx); err != nil {
		t.Fatal(err)
	}
	val := bytes.Repeat([]byte{7}, 300<<10)
	meta := Meta{Fmt: 1, Dtype: 3, Shape: [4]int32{2, 32, 8, 128}}
	if err := c.Put(ctx, "model@1@0@k1@bfloat16", meta, val); err != nil {
		t.Fatal(err)
	}
	got, gotMeta, err := c.Get(ctx, "model@1@0@k1@bfloat16")
	if err != nil || !bytes.Equal(got, val) || gotMeta.Shape != meta.Shape || gotMeta.Dtype != 3 || gotMeta.Length != int32(len(val)) {
		t.Fatalf("get: %d bytes, meta %+v, err %v", len(got), gotMeta, err)
	}
	if _, _, err := c.Get(ctx, "absent"); !errors.Is(err, ErrMiss) {
		t.Fatalf("miss: %v", err)
	}
	// GetInto reads into the caller's buffer when it is large enough, and
	// allocates when it is not.
	buf := make([]byte, 0, len(val))
	into, _, err := c.GetInto(ctx, "model@1@0@k1@bfloat16", buf)
	if err != nil || !bytes.Equal(into, val) || &into[0] != &buf[:1][0] {
		t.Fatalf("get into a large enough buffer: %d bytes, aliased %v, err %v", len(into), len(into) > 0 && &into[0] == &buf[:1][0], err)
	}
	small := make([]byte, 0, 10)
	if into, _, err = c.GetInto(ctx, "model@1@0@k1@bfloat16", small); err != nil || !bytes.Equal(into, val) {
		t.Fatalf("get into a small buffer: %d bytes, err %v", len(into), err)
	}
	if ok, err := c.Exist(ctx, "model@1@0@k1@bfloat16"); !ok || err != nil {
		t.Fatalf("exist: %v %v", ok, err)
	}
	if err := c.Put(ctx, strings.Repeat("x", 151), meta, val); err == nil {
		t.Fatal("oversized key accepted")
	}
}

func TestClientTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		conn, err := ln.Accept()
		if err == nil {
			defer conn.Close()
			time.Sleep(2 * time.Second) // never answers
		}
	}()
	c := Dial(ln.Addr().String(), 100*time.Millisecond, 0)
	defer c.Close()
	start := time.Now()
	if err := c.Health(context.Background()); err == nil {
		t.Fatal("a server that never answers passed the health check")
	}
	if time.Since(start) > time.Second {
		t.Fatal("the call outlived its timeout")
	}
}

// FuzzReader feeds arbitrary bytes as a connection's requests: every
// outcome is a request, io.EOF or a protocol error; never a panic, never
// an allocation beyond the value limit.
func FuzzReader(f *testing.F) {
	f.Add([]byte(putFixture + "abcd"))
	f.Add([]byte(putFixture[:100]))
	get, _ := AppendRequest(nil, &RequestHeader{Command: CmdGet, Key: "k"})
	f.Add(append(get, get...))
	f.Add([]byte{})
	f.Add([]byte(le(CmdHealth) + strings.Repeat(le(0), 8) + strings.Repeat(" ", KeySize)))
	f.Fuzz(func(t *testing.T, in []byte) {
		rd := NewReader(bytes.NewReader(in), 1<<16)
		for range 64 {
			req, err := rd.Next()
			if err != nil {
				if !errors.Is(err, io.EOF) && !errors.Is(err, ErrProtocol) {
					t.Fatalf("unexpected error kind: %v", err)
				}
				return
			}
			if (req.Key == "" && req.Command != CmdHealth) || len(req.Key) > KeySize || len(req.Value) > 1<<16 {
				t.Fatalf("bad request accepted: %+v", req.RequestHeader)
			}
		}
	})
}

func TestClientDelete(t *testing.T) {
	c := Dial(serve(t), time.Second, 0)
	defer c.Close()
	ctx := t.Context()
	if err := c.Put(ctx, "k", Meta{}, []byte("v")); err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{true, false} {
		if ok, err := c.Delete(ctx, "k"); ok != want || err != nil {
			t.Fatalf("delete %d: %v, %v; want %v", i, ok, err, want)
		}
	}
	if ok, err := c.Exist(ctx, "k"); ok || err != nil {
		t.Fatalf("exist after delete: %v, %v", ok, err)
	}
}
