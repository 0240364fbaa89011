package strategy

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// hrwOrder returns the endpoint IDs in key's rendezvous order, best first.
func hrwOrder(key string, e []Endpoint) []string {
	k := xxhash.Sum64String(key)
	ids := make([]string, len(e))
	for i := range e {
		ids[i] = e[i].ID
	}
	slices.SortFunc(ids, func(a, b string) int {
		wa, wb := rendezvous(k, a), rendezvous(k, b)
		switch {
		case wa > wb:
			return -1
		case wa < wb:
			return 1
		}
		return 0
	})
	return ids
}

func pickID(t *testing.T, s Strategy, req *Request, e []Endpoint) string {
	t.Helper()
	d, err := s.Pick(req, e)
	if err != nil {
		t.Fatal(err)
	}
	return d.Endpoint
}

func withLoad(e []Endpoint, id string, load int) []Endpoint {
	out := slices.Clone(e)
	for i := range out {
		if out[i].ID == id {
			out[i].InFlight = load
		}
	}
	return out
}

func TestSessionBoundedLoad(t *testing.T) {
	base := eps(2, 2, 2, 2) // mean 2: bound = 1.25 × 3 = 3.75 before any change
	const key = "conversation-7"
	order := hrwOrder(key, base)
	tests := []struct {
		name string
		e    []Endpoint
		want string
	}{
		{"owner within bound keeps the session", base, order[0]},
		{"owner at the bound keeps it", withLoad(base, order[0], 4), order[0]}, // mean 2.5, bound 4.375
		{"owner over the bound moves it to the next in HRW order", withLoad(base, order[0], 9), order[1]},
		{"owner and runner-up over the bound", withLoad(withLoad(base, order[0], 9), order[1], 9), order[2]},
		{"owner gone", slices.DeleteFunc(slices.Clone(base), func(e Endpoint) bool { return e.ID == order[0] }), order[1]},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewSession(SessionConfig{}, nil)
			if got := pickID(t, s, &Request{SessionKey: key}, tt.e); got != tt.want {
				t.Errorf("Pick = %s, want %s (HRW order %v)", got, tt.want, order)
			}
		})
	}
}

func TestSessionSticky(t *testing.T) {
	s := NewSession(SessionConfig{}, nil)
	e := eps(3, 1, 4, 2, 2)
	for k := range 200 {
		req := &Request{SessionKey: fmt.Sprintf("user-%d", k), Prompt: "hello"}
		first := pickID(t, s, req, e)
		for range 5 {
			if got := pickID(t, s, req, e); got != first {
				t.Fatalf("session %s moved from %s to %s at unchanged load", req.SessionKey, first, got)
			}
		}
	}
}

func TestSessionNoKeyFallsBack(t *testing.T) {
	s := NewSession(SessionConfig{}, nil)
	d, err := s.Pick(&Request{Model: "m", Prompt: "some prompt"}, eps(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	if d.Strategy != NamePrefixAware {
		t.Errorf("Strategy = %q, want %q", d.Strategy, NamePrefixAware)
	}
	d, _ = s.Pick(&Request{SessionKey: "k"}, eps(0, 0))
	if d.Strategy != NameSession {
		t.Errorf("with key: Strategy = %q, want %q", d.Strategy, NameSession)
	}
	if _, err := s.Pick(&Request{SessionKey: "k"}, nil); !errors.Is(err, ErrNoEndpoint) {
		t.Errorf("Pick(nil) error = %v, want ErrNoEndpoint", err)
	}
}

// TestSessionTeachesFallback: a keyless request continuing a session's
// prompt goes where the session went and reports the match.
func TestSessionTeachesFallback(t *testing.T) {
	s := NewSession(SessionConfig{}, nil)
	e := eps(0, 0, 0, 0)
	prompt := longText(1, 1024)
	owner := pickID(t, s, &Request{Model: "m", Prompt: prompt, SessionKey: "k"}, e)
	d, err := s.Pick(&Request{Model: "m", Prompt: prompt + " more"}, e)
	if err != nil {
		t.Fatal(err)
	}
	if d.Endpoint != owner || d.MatchedChunks != 8 {
		t.Errorf("keyless Pick = %s with %d matched chunks, want %s with 8", d.Endpoint, d.MatchedChunks, owner)
	}
}

// TestSessionMinimalMovement is the HRW property: adding or removing one of
// N idle endpoints moves about 1/N of the keys, and only keys that must
// move (to the new endpoint, or off the removed one).
func TestSessionMinimalMovement(t *testing.T) {
	const n, keys = 10, 20000
	all := make([]Endpoint, n+1)
	for i := range all {
		all[i] = Endpoint{ID: fmt.Sprintf("http://10.0.0.%d:8000", i)}
	}
	before, after := all[:n], all
	s := NewSession(SessionConfig{}, nil)
	moved := 0
	perEndpoint := map[string]int{}
	for k := range keys {
		req := &Request{SessionKey: fmt.Sprintf("session-%d", k)}
		a, b := pickID(t, s, req, before), pickID(t, s, req, after)
		perEndpoint[a]++
		if a != b {
			moved++
			if b != all[n].ID {
				t.Fatalf("adding %s moved key %s from %s to %s", all[n].ID, req.SessionKey, a, b)
			}
		}
	}
	if got, want := float64(moved)/keys, 1.0/(n+1); got < want*0.8 || got > want*1.2 {
		t.Errorf("adding 1 endpoint to %d moved %.3f of keys, want about %.3f", n, got, want)
	}
	for id, c := range perEndpoint {
		if c < keys/n*8/10 || c > keys/n*12/10 {
			t.Errorf("endpoint %s owns %d of %d keys, want about %d", id, c, keys, keys/n)
		}
	}

	removed := before[3].ID
	without := slices.Concat(before[:3], before[4:])
	moved = 0
	for k := range keys {
		req := &Request{SessionKey: fmt.Sprintf("session-%d", k)}
		a, b := pickID(t, s, req, before), pickID(t, s, req, without)
		if a != b {
			moved++
			if a != removed {
				t.Fatalf("removing %s moved key %s from %s", removed, req.SessionKey, a)
			}
		}
	}
	if got, want := float64(moved)/keys, 1.0/n; got < want*0.8 || got > want*1.2 {
		t.Errorf("removing 1 of %d endpoints moved %.3f of keys, want about %.3f", n, got, want)
	}
}

// TestSessionBoundHolds: many sessions, each pick adds load; no endpoint
// ever exceeds the bound at the time it is chosen.
func TestSessionBoundHolds(t *testing.T) {
	s := NewSession(SessionConfig{LoadFactor: 1.25}, nil)
	e := eps(0, 0, 0, 0, 0)
	for k := range 1000 {
		d, err := s.Pick(&Request{SessionKey: fmt.Sprintf("s%d", k%37)}, e)
		if err != nil {
			t.Fatal(err)
		}
		var total float64
		for _, x := range e {
			total += x.Load()
		}
		bound := 1.25 * (total/float64(len(e)) + 1)
		for i := range e {
			if e[i].ID == d.Endpoint {
				if e[i].Load() > bound {
					t.Fatalf("pick %d: %s chosen at load %v over bound %v", k, e[i].ID, e[i].Load(), bound)
				}
				e[i].InFlight++
			}
		}
	}
}
