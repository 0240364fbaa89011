package blockhash

import "testing"

func TestChainDeterminism(t *testing.T) {
	a, err := New("42")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := New("42")
	c, _ := New("43")
	r, _ := New("")
	toks := make([]uint32, 40)
	for i := range toks {
		toks[i] = uint32(i)
	}
	ha := a.Chain(toks, 16, nil)
	if got, want := len(ha), 2; got != want {
		t.Fatalf("got %d full blocks, want %d (partial block must not hash)", got, want)
	}
	if hb := b.Chain(toks, 16, nil); hb[0] != ha[0] || hb[1] != ha[1] {
		t.Fatal("same seed gave different hashes")
	}
	if hc := c.Chain(toks, 16, nil); hc[0] == ha[0] {
		t.Fatal("different seeds gave the same first hash")
	}
	if hr := r.Chain(toks, 16, nil); hr[0] == ha[0] {
		t.Fatal("random root equals seeded root")
	}
	if hs := a.Chain(toks, 16, []string{"salt"}); hs[0] == ha[0] || hs[1] == ha[1] {
		t.Fatal("cache salt on the first block must change every later hash")
	}
	// Chaining: a block's hash depends on its parent, not only its tokens.
	other := append([]uint32{99}, toks[1:]...)
	if ho := a.Chain(other, 16, nil); ho[1] == ha[1] {
		t.Fatal("second block hash ignored a change in the first block")
	}
}
