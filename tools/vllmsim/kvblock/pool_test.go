package kvblock

import (
	"testing"

	"github.com/warmpath/warmpath/libs/blockhash"
)

func hashOf(b byte) blockhash.Hash {
	var h blockhash.Hash
	h[0] = b
	return h
}

func TestDuplicateCopiesAreCountedSeparately(t *testing.T) {
	p := New(4, 2, true)
	a, _ := p.Allocate(1)
	b, _ := p.Allocate(1)
	h := hashOf(1)
	p.Register(a, []blockhash.Hash{h}, nil, []uint32{1, 2})
	p.Register(b, []blockhash.Hash{h}, nil, []uint32{1, 2})
	if got := p.NumCached(); got != 2 {
		t.Fatalf("NumCached = %d, want 2 (vLLM keeps physical duplicates)", got)
	}
	stored := 0
	for _, ev := range p.TakeEvents() {
		if ev.Kind == Stored {
			stored += len(ev.Hashes)
		}
	}
	if stored != 2 {
		t.Fatalf("stored events for %d blocks, want 2", stored)
	}
	p.Free(a)
	p.Free(b)
	// Allocating all 4 blocks evicts both copies: two Removed events.
	if _, err := p.Allocate(4); err != nil {
		t.Fatal(err)
	}
	removed := 0
	for _, ev := range p.TakeEvents() {
		if ev.Kind == Removed {
			removed++
		}
	}
	if removed != 2 {
		t.Fatalf("removed events = %d, want 2", removed)
	}
	if len(p.Lookup([]blockhash.Hash{h})) != 0 {
		t.Fatal("hash still found after both copies were evicted")
	}
}

func TestTouchRevivesFreedBlock(t *testing.T) {
	p := New(2, 2, true)
	ids, _ := p.Allocate(1)
	p.Register(ids, []blockhash.Hash{hashOf(7)}, nil, []uint32{3, 4})
	p.Free(ids)
	if p.NumFree() != 2 {
		t.Fatalf("NumFree = %d, want 2", p.NumFree())
	}
	hit := p.Lookup([]blockhash.Hash{hashOf(7), hashOf(8)})
	if len(hit) != 1 || hit[0] != ids[0] {
		t.Fatalf("Lookup = %v, want [%d]", hit, ids[0])
	}
	if p.FreeAmong(hit) != 1 {
		t.Fatal("FreeAmong did not count the freed cached block")
	}
	p.Touch(hit)
	if p.NumFree() != 1 || p.Usage() != 0.5 {
		t.Fatalf("after touch NumFree=%d usage=%v, want 1 and 0.5", p.NumFree(), p.Usage())
	}
	if _, err := p.Allocate(2); err == nil {
		t.Fatal("allocated more blocks than free")
	}
}

func TestResetRefusedWhileInUse(t *testing.T) {
	p := New(2, 2, true)
	ids, _ := p.Allocate(1)
	p.Register(ids, []blockhash.Hash{hashOf(1)}, nil, []uint32{1, 2})
	if p.Reset() {
		t.Fatal("Reset succeeded with a block in use")
	}
	p.Free(ids)
	p.TakeEvents()
	if !p.Reset() {
		t.Fatal("Reset failed with nothing in use")
	}
	ev := p.TakeEvents()
	if len(ev) != 1 || ev[0].Kind != Cleared {
		t.Fatalf("events after reset = %+v, want one Cleared", ev)
	}
	if p.NumCached() != 0 {
		t.Fatal("cache not empty after reset")
	}
}

func TestNoCachingRegistersNothing(t *testing.T) {
	p := New(2, 2, false)
	ids, _ := p.Allocate(1)
	p.Register(ids, []blockhash.Hash{hashOf(1)}, nil, []uint32{1, 2})
	if p.NumCached() != 0 || len(p.TakeEvents()) != 0 {
		t.Fatal("pool without prefix caching registered a block")
	}
}

func TestDoubleFreePanics(t *testing.T) {
	p := New(1, 2, true)
	ids, _ := p.Allocate(1)
	p.Free(ids)
	defer func() {
		if recover() == nil {
			t.Fatal("double free did not panic")
		}
	}()
	p.Free(ids)
}
