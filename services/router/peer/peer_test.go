package peer

import (
	"strings"
	"testing"
)

func TestKey(t *testing.T) {
	doc := strings.Repeat("a shared document of some length ", 100)
	for _, tc := range []struct {
		name string
		a, b string
		same bool
	}{
		{"prompts sharing their head share an owner", doc + "first question?", doc + "second question?", true},
		{"a prompt shorter than the key is keyed whole", "hi", "hi", true},
		{"different heads spread", "system: you are a pirate. " + doc, "system: you are a poet. " + doc, false},
		{"a difference past the key does not count", doc[:KeyBytes] + "x", doc[:KeyBytes] + "y", true},
		{"a difference inside the key counts", doc[:KeyBytes-1] + "x", doc[:KeyBytes-1] + "y", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Key(tc.a) == Key(tc.b); got != tc.same {
				t.Errorf("Key(a) == Key(b) is %v, want %v", got, tc.same)
			}
		})
	}
}

func TestKeyOfTokens(t *testing.T) {
	head := make([]uint32, KeyTokens)
	for i := range head {
		head[i] = uint32(i)
	}
	a := append(append([]uint32{}, head...), 1, 2, 3)
	b := append(append([]uint32{}, head...), 9)
	if KeyOfTokens(a) != KeyOfTokens(b) {
		t.Error("prompts sharing their first KeyTokens tokens have different keys")
	}
	c := append([]uint32{7}, head[1:]...)
	if KeyOfTokens(a) == KeyOfTokens(c) {
		t.Error("prompts differing in their first token share a key")
	}
}
