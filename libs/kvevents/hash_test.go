package kvevents

import "testing"

func TestBlockHashIsZero(t *testing.T) {
	tests := []struct {
		name string
		h    BlockHash
		want bool
	}{
		{"integer 0", IntHash(0), true},
		{"integer 1", IntHash(1), false},
		{"zero bytes", BytesHash(make([]byte, 32)), true},
		{"bytes ending in zeros", BytesHash(append([]byte{1}, make([]byte, 31)...)), false},
		{"bytes", BytesHash([]byte{0, 0, 7}), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.h.IsZero(); got != tt.want {
				t.Fatalf("IsZero = %v, want %v", got, tt.want)
			}
		})
	}
}
