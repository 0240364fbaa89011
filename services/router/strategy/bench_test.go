package strategy

import (
	"fmt"
	"testing"
)

// benchEndpoints returns n endpoints with URL-like IDs, varied loads and a
// known cache capacity.
func benchEndpoints(n int) []Endpoint {
	e := make([]Endpoint, n)
	for i := range e {
		e[i] = Endpoint{ID: fmt.Sprintf("http://10.0.%d.%d:8000", i/250, i%250), InFlight: i % 3, NumGPUBlocks: 20000, BlockSize: 16}
	}
	return e
}

// BenchmarkPrefixAwarePick: an 8 KiB prompt (64 chunks) over 16 endpoints
// that all hold its 6 KiB shared prefix, so every candidate's match walks
// deep; each iteration's prompt has a unique tail.
func BenchmarkPrefixAwarePick(b *testing.B) {
	p := NewPrefixAware(PrefixAwareConfig{}, Defaults().LoadGuard)
	e := benchEndpoints(16)
	sys := longText(1, 6*1024)
	for i := range e {
		p.observe("", &Request{Model: "m", Prompt: sys}, &e[i])
	}
	tails := make([]string, 1024)
	for i := range tails {
		tails[i] = longText(uint64(i), 2*1024)
	}
	reqs := make([]Request, len(tails))
	for i := range reqs {
		reqs[i] = Request{Model: "m", Prompt: sys + tails[i]}
	}
	b.ReportAllocs()
	b.SetBytes(8 * 1024)
	i := 0
	for b.Loop() {
		if _, err := p.Pick(&reqs[i%len(reqs)], e); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkSessionPick: a session request with an 8 KiB prompt over 16
// endpoints (HRW placement plus recording for the fallback).
func BenchmarkSessionPick(b *testing.B) {
	s := NewSession(SessionConfig{}, nil)
	e := benchEndpoints(16)
	req := &Request{Model: "m", Prompt: longText(1, 8*1024)}
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = fmt.Sprintf("session-%d", i)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		req.SessionKey = keys[i%len(keys)]
		if _, err := s.Pick(req, e); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkRoundRobinPick: 16 endpoints.
func BenchmarkRoundRobinPick(b *testing.B) {
	r := NewRoundRobin()
	e := benchEndpoints(16)
	req := &Request{}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := r.Pick(req, e); err != nil {
			b.Fatal(err)
		}
	}
}
