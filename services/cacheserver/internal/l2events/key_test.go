package l2events

import (
	"bytes"
	"encoding/hex"
	"errors"
	"math/big"
	"strconv"
	"strings"
	"testing"
)

func hash32(t testing.TB, hex64 string) [HashLen]byte {
	t.Helper()
	b, err := hex.DecodeString(hex64)
	if err != nil || len(b) != HashLen {
		t.Fatalf("bad test hash %q", hex64)
	}
	return [HashLen]byte(b)
}

const (
	sha    = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
	short  = "1a2b3c"
	shortP = "00000000000000000000000000000000000000000000000000000000001a2b3c"
)

func TestParseKey(t *testing.T) {
	tests := []struct {
		name    string
		key     string
		model   string
		worker  int
		hash    string // 64 hex digits
		data    bool
		wantErr bool
	}{
		{name: "lm bare", key: "llama@1@0@" + sha + "@bfloat16", model: "llama", hash: sha, data: true},
		{name: "older with fmt", key: "vllm@llama@2@1@" + sha + "@half", model: "llama", worker: 1, hash: sha, data: true},
		{name: "model with slash", key: "meta-llama/Llama-3.1-8B@4@3@" + sha + "@bfloat16", model: "meta-llama/Llama-3.1-8B", worker: 3, hash: sha, data: true},
		{name: "redis kv_bytes", key: "llama@1@0@" + sha + "@bfloat16kv_bytes", model: "llama", hash: sha, data: true},
		{name: "redis metadata", key: "llama@1@0@" + sha + "@bfloat16metadata", model: "llama", hash: sha, data: false},
		{name: "valkey kv_bytes", key: "llama@1@0@" + sha + "@bfloat16:kv_bytes", model: "llama", hash: sha, data: true},
		{name: "valkey metadata", key: "llama@1@0@" + sha + "@bfloat16:metadata", model: "llama", hash: sha, data: false},
		{name: "int hex, leading zeros dropped", key: "llama@1@0@" + short + "@bfloat16", model: "llama", hash: shortP, data: true},
		{name: "odd digit count", key: "llama@1@0@abc@bfloat16", model: "llama", hash: strings.Repeat("0", 61) + "abc", data: true},
		{name: "0x prefix and upper case", key: "llama@1@0@0x1A2B3C@bfloat16", model: "llama", hash: shortP, data: true},
		{name: "leading zeros beyond 64 digits", key: "llama@1@0@0000" + sha + "@bfloat16", model: "llama", hash: sha, data: true},
		{name: "zero hash", key: "llama@1@0@0@bfloat16", model: "llama", hash: strings.Repeat("0", 64), data: true},
		{name: "too few fields", key: "llama@1@0@" + sha, wantErr: true},
		{name: "too many fields", key: "a@b@llama@1@0@" + sha + "@bfloat16", wantErr: true},
		{name: "plain word", key: "hello", wantErr: true},
		{name: "empty", key: "", wantErr: true},
		{name: "only a suffix", key: "kv_bytes", wantErr: true},
		{name: "empty model", key: "@1@0@" + sha + "@bfloat16", wantErr: true},
		{name: "empty dtype", key: "llama@1@0@" + sha + "@", wantErr: true},
		{name: "empty fmt", key: "@llama@1@0@" + sha + "@half", wantErr: true},
		{name: "bad worker", key: "llama@1@w0@" + sha + "@bfloat16", wantErr: true},
		{name: "negative worker", key: "llama@1@-1@" + sha + "@bfloat16", wantErr: true},
		{name: "bad world size", key: "llama@x@0@" + sha + "@bfloat16", wantErr: true},
		{name: "not hex", key: "llama@1@0@xyz@bfloat16", wantErr: true},
		{name: "negative hash", key: "llama@1@0@-1a@bfloat16", wantErr: true},
		{name: "empty hash", key: "llama@1@0@@bfloat16", wantErr: true},
		{name: "bare 0x", key: "llama@1@0@0x@bfloat16", wantErr: true},
		{name: "hash over 32 bytes", key: "llama@1@0@1" + sha + "@bfloat16", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k, data, err := ParseKey(tt.key)
			if tt.wantErr {
				if !errors.Is(err, ErrKey) {
					t.Fatalf("ParseKey(%q) = %+v, %v; want an ErrKey error", tt.key, k, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseKey(%q): %v", tt.key, err)
			}
			want := Key{Model: tt.model, WorkerID: tt.worker, Hash: hash32(t, tt.hash)}
			if k != want || data != tt.data {
				t.Errorf("ParseKey(%q) = %+v data %v, want %+v data %v", tt.key, k, data, want, tt.data)
			}
		})
	}
}

// The simulator's 64-digit form and real LMCache's int form of one hash
// name one chunk.
func TestHashFormsAgree(t *testing.T) {
	a, err := ParseHash(shortP)
	if err != nil {
		t.Fatal(err)
	}
	b, err := ParseHash(short)
	if err != nil {
		t.Fatal(err)
	}
	if a != b {
		t.Errorf("%x != %x", a, b)
	}
}

func FuzzParseKey(f *testing.F) {
	for _, s := range []string{
		"llama@1@0@" + sha + "@bfloat16", "vllm@llama@2@1@" + short + "@half",
		"m@1@0@0x0@f:kv_bytes", "m@1@0@abc@fmetadata", "", "@@@@", "a@b@c@d@e@f@g",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		k, data, err := ParseKey(key)
		if err != nil {
			if !errors.Is(err, ErrKey) {
				t.Fatalf("error %v does not wrap ErrKey", err)
			}
			return
		}
		if k.Model == "" || k.WorkerID < 0 {
			t.Fatalf("accepted %q as %+v", key, k)
		}
		// The canonical form (64 digits, no fmt, bare) names the same chunk.
		canon := k.Model + "@1@" + strconv.Itoa(k.WorkerID) + "@" + hex.EncodeToString(k.Hash[:]) + "@d"
		k2, data2, err := ParseKey(canon)
		if err != nil || k2 != k || !data2 {
			t.Fatalf("%q -> %+v %v; canonical %q -> %+v %v %v", key, k, data, canon, k2, data2, err)
		}
	})
}

// The store's hook parses every key it changes, under the store's lock.
func TestParseKeyAllocs(t *testing.T) {
	for _, key := range []string{"llama@1@0@" + sha + "@bfloat16:kv_bytes", "vllm@llama@2@1@" + short + "@half"} {
		if n := testing.AllocsPerRun(100, func() { _, _, _ = ParseKey(key) }); n != 0 {
			t.Errorf("ParseKey(%q): %v allocations, want 0", key, n)
		}
	}
}

// ParseHash agrees with math/big on what the hex means.
func FuzzParseHash(f *testing.F) {
	for _, s := range []string{sha, short, "0x1A", "0", "abc", "-1", "0x", strings.Repeat("f", 65), "0000" + sha} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseHash(s)
		digits := strings.TrimPrefix(strings.TrimPrefix(s, "0x"), "0X")
		n, ok := new(big.Int).SetString(digits, 16)
		ok = ok && digits != "" && !strings.ContainsAny(digits, "+-_") && n.BitLen() <= 8*HashLen
		if (err == nil) != ok {
			t.Fatalf("ParseHash(%q): %v; big.Int says valid=%v", s, err, ok)
		}
		if ok && !bytes.Equal(got[:], n.FillBytes(make([]byte, HashLen))) {
			t.Fatalf("ParseHash(%q) = %x, big.Int %x", s, got, n)
		}
	})
}
