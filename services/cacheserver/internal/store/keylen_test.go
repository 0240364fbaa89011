package store

import (
	"strings"
	"testing"
)

// TestDiskKeyLength: the file format stores a key's length in 16 bits, so
// a longer key must be refused, not written with a wrapped length and
// read back corrupt.
func TestDiskKeyLength(t *testing.T) {
	tests := []struct {
		name    string
		keyLen  int
		wantErr bool
	}{
		{"short", 10, false},
		{"at the limit", MaxKeyBytes, false},
		{"one over", MaxKeyBytes + 1, true},
		{"far over", 200 << 10, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := OpenDisk(t.TempDir(), 64<<20, nil)
			if err != nil {
				t.Fatal(err)
			}
			key := strings.Repeat("k", tt.keyLen)
			err = d.Put(key, &Object{Value: []byte("value")})
			if (err != nil) != tt.wantErr {
				t.Fatalf("Put: %v, want an error: %v", err, tt.wantErr)
			}
			got, ok := d.Get(key)
			if tt.wantErr {
				if ok || d.Stats().Objects != 0 {
					t.Fatal("a refused key was stored")
				}
				return
			}
			if !ok || string(got.Value) != "value" {
				t.Fatalf("round trip: %v %v", ok, got)
			}
		})
	}
}
