package peerload

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warmpath/warmpath/services/router/internal/discovery"
	"github.com/warmpath/warmpath/services/router/internal/peers"
	"github.com/warmpath/warmpath/services/router/internal/pool"
)

const (
	w1 = "http://10.1.0.1:8000"
	w2 = "http://10.1.0.2:8000"
)

// counts is a Counter keeping what it was told.
type counts struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *counts) Inc(result string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[result]++
}

func (c *counts) get(result string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[result]
}

// replica is one router's pool and sharer, served over real HTTP.
type replica struct {
	pool   *pool.Pool
	sharer *Sharer
	srv    *httptest.Server
	polls  *counts
}

// newReplicas starts n replicas on 127.0.0.1, each knowing every other,
// all routing to w1 and w2.
func newReplicas(t *testing.T, n int) []*replica {
	t.Helper()
	rs := make([]*replica, n)
	var ids []discovery.Target
	for i := range rs {
		r := &replica{pool: pool.New(), polls: &counts{}}
		r.pool.Update([]discovery.Target{{URL: w1}, {URL: w2}})
		r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) { r.sharer.ServeHTTP(w, req) }))
		t.Cleanup(r.srv.Close)
		ids = append(ids, discovery.Target{URL: r.srv.URL})
		rs[i] = r
	}
	for _, r := range rs {
		set := peers.New(r.srv.URL)
		set.Update(ids)
		r.sharer = New(Config{Interval: time.Second, Polls: r.polls}, r.pool, set)
	}
	return rs
}

func TestPeersSeeEachOthersLoad(t *testing.T) {
	rs := newReplicas(t, 3)
	a, b, c := rs[0], rs[1], rs[2]
	for range 3 {
		defer b.pool.Get(w1).Acquire()()
	}
	defer c.pool.Get(w1).Acquire()()
	defer c.pool.Get(w2).Acquire()()
	defer a.pool.Get(w2).Acquire()() // its own: never counted as a peer's

	a.sharer.Poll(t.Context())
	if got := a.pool.Get(w1).PeerInFlight(); got != 4 {
		t.Errorf("w1: peers' in flight %d, want 4 (3 from b, 1 from c)", got)
	}
	if got := a.pool.Get(w2).PeerInFlight(); got != 1 {
		t.Errorf("w2: peers' in flight %d, want 1 (c's; a's own is InFlight)", got)
	}
	if got := a.polls.get("ok"); got != 2 {
		t.Errorf("%d ok polls, want 2 (b and c)", got)
	}

	// External adds what the last scrape saw beyond every replica's
	// requests: here 2 more at w1 than the 4 peers' and 0 own.
	a.pool.Get(w1).SetStats(pool.Stats{Running: 5, Waiting: 1, PeerInFlightAtScrape: 4})
	if got := a.pool.Get(w1).External(); got != 6 {
		t.Errorf("w1 External %d, want 6 (4 peers' + 2 unexplained)", got)
	}
}

func TestStalePeerStopsCounting(t *testing.T) {
	rs := newReplicas(t, 2)
	a, b := rs[0], rs[1]
	defer b.pool.Get(w1).Acquire()()
	a.sharer.Poll(t.Context())
	if got := a.pool.Get(w1).PeerInFlight(); got != 1 {
		t.Fatalf("peers' in flight %d, want 1", got)
	}

	b.srv.Close() // b dies
	a.sharer.Poll(t.Context())
	if got := a.polls.get("failed"); got != 1 {
		t.Errorf("%d failed polls, want 1", got)
	}
	if got := a.pool.Get(w1).PeerInFlight(); got != 1 {
		t.Errorf("right after b failed: %d, want its last report (1) kept", got)
	}
	a.sharer.apply(time.Now().Add(4*time.Second), a.sharer.peers.Others())
	if got := a.pool.Get(w1).PeerInFlight(); got != 0 {
		t.Errorf("three intervals after b's last report: %d, want 0", got)
	}
}

func TestPeerLeavingTheSetIsForgotten(t *testing.T) {
	rs := newReplicas(t, 2)
	a, b := rs[0], rs[1]
	defer b.pool.Get(w1).Acquire()()
	a.sharer.Poll(t.Context())
	a.sharer.apply(time.Now(), nil) // b left the set
	if got := a.pool.Get(w1).PeerInFlight(); got != 0 {
		t.Errorf("after b left: %d, want 0", got)
	}
	if len(a.sharer.reports) != 0 {
		t.Errorf("reports %v kept for replicas no longer in the set", a.sharer.reports)
	}
}

func TestUnknownWorkerIgnored(t *testing.T) {
	rs := newReplicas(t, 2)
	a, b := rs[0], rs[1]
	b.pool.Update([]discovery.Target{{URL: w1}, {URL: "http://10.1.0.9:8000"}})
	defer b.pool.Get("http://10.1.0.9:8000").Acquire()()
	a.sharer.Poll(t.Context())
	for _, ep := range a.pool.All() {
		if n := ep.PeerInFlight(); n != 0 {
			t.Errorf("%s: %d, want 0 (b's load is at a worker a does not know)", ep.URL, n)
		}
	}
}

func TestOnlyPeersMayRead(t *testing.T) {
	set := peers.New("http://10.0.0.1:8080")
	set.Update([]discovery.Target{{URL: "http://10.0.0.1:8080"}, {URL: "http://10.0.0.2:8080"}})
	s := New(Config{}, pool.New(), set)
	for _, tc := range []struct {
		remote string
		want   int
	}{
		{"10.0.0.2:41000", http.StatusOK},
		{"127.0.0.1:41000", http.StatusForbidden},
		{"garbage", http.StatusForbidden},
	} {
		req := httptest.NewRequest(http.MethodGet, Path, nil)
		req.RemoteAddr = tc.remote
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		if rec.Code != tc.want {
			t.Errorf("from %s: status %d, want %d", tc.remote, rec.Code, tc.want)
		}
		if tc.want != http.StatusOK {
			var body struct {
				Error struct{ Message, Type string }
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || body.Error.Message == "" {
				t.Errorf("from %s: body %q is not an OpenAI-style error (%v)", tc.remote, rec.Body, err)
			}
		}
	}
}

func TestBadReportsFailThePoll(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		status     int
	}{
		{"garbage", "not json", http.StatusOK},
		{"negative", `{"inFlight":{"` + w1 + `":-5}}`, http.StatusOK},
		{"error status", `{"error":{"message":"no"}}`, http.StatusForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte(tc.body))
			}))
			defer srv.Close()
			set := peers.New("http://127.0.0.1:1")
			set.Update([]discovery.Target{{URL: "http://127.0.0.1:1"}, {URL: srv.URL}})
			p := pool.New()
			p.Update([]discovery.Target{{URL: w1}})
			polls := &counts{}
			s := New(Config{Polls: polls}, p, set)
			s.Poll(t.Context())
			if polls.get("failed") != 1 || polls.get("ok") != 0 {
				t.Errorf("polls %v, want one failed", polls.n)
			}
			if n := p.Get(w1).PeerInFlight(); n != 0 {
				t.Errorf("in flight %d taken from a bad report", n)
			}
		})
	}
}

func TestDecode(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     map[string]int
		err      string
	}{
		{"report", `{"inFlight":{"a":1,"b":2}}`, map[string]int{"a": 1, "b": 2}, ""},
		{"empty", `{"inFlight":{}}`, map[string]int{}, ""},
		{"negative", `{"inFlight":{"a":-1}}`, nil, "negative count"},
		{"trailing", `{"inFlight":{}} {}`, nil, "data after"},
		{"not a count", `{"inFlight":{"a":"x"}}`, nil, "decode"},
		{"too large", `{"inFlight":{"` + strings.Repeat("a", maxReportBytes) + `":1}}`, nil, "decode"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep, err := Decode(strings.NewReader(tc.in))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.InFlight) != len(tc.want) {
				t.Fatalf("got %v, want %v", rep.InFlight, tc.want)
			}
			for k, v := range tc.want {
				if rep.InFlight[k] != v {
					t.Errorf("%s: %d, want %d", k, rep.InFlight[k], v)
				}
			}
		})
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"inFlight":{"http://10.0.0.1:8000":3}}`))
	f.Add([]byte(`{"inFlight":{}}`))
	f.Add([]byte(`{"inFlight":{"a":-1}}`))
	f.Add([]byte(`{} {}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		rep, err := Decode(bytes.NewReader(b))
		if err != nil {
			return
		}
		for w, n := range rep.InFlight {
			if n < 0 {
				t.Fatalf("accepted negative count %d for %q", n, w)
			}
		}
		// What was accepted encodes and decodes to the same report.
		var buf bytes.Buffer
		if err := json.NewEncoder(&buf).Encode(rep); err != nil {
			t.Fatal(err)
		}
		again, err := Decode(&buf)
		if err != nil || len(again.InFlight) != len(rep.InFlight) {
			t.Fatalf("round trip: %v, %d entries, want %d", err, len(again.InFlight), len(rep.InFlight))
		}
	})
}
