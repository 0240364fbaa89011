package pool

import (
	"testing"
	"time"

	"github.com/warmpath/warmpath/services/router/internal/discovery"
)

func TestEjectionBackoffAndProbeBack(t *testing.T) {
	cfg := Ejection{ConsecutiveFailures: 2, BaseDuration: time.Second, MaxDuration: 3 * time.Second}
	ep := NewEndpoint("http://w", "")
	now := time.Unix(1000, 0)
	ep.SetHealthy(true, now)
	if ep.RecordFailure(cfg, now) {
		t.Fatal("ejected after 1 failure, want 2")
	}
	if !ep.RecordFailure(cfg, now) || !ep.Ejected() || ep.Available() {
		t.Fatal("not ejected after 2 consecutive failures")
	}
	if got, want := ep.EjectedUntil(), now.Add(time.Second); !got.Equal(want) {
		t.Fatalf("ejected until %v, want %v", got, want)
	}
	// A passing health check before the ejection ends does not readmit.
	ep.SetHealthy(true, now.Add(500*time.Millisecond))
	if !ep.Ejected() {
		t.Fatal("readmitted before the ejection ended")
	}
	// After it ends, a passing check probes it back in.
	ep.SetHealthy(true, now.Add(time.Second))
	if ep.Ejected() || !ep.Available() {
		t.Fatal("not readmitted by a passing check after the ejection")
	}
	// Without a success in between, the next ejection doubles, capped.
	tests := []time.Duration{2 * time.Second, 3 * time.Second, 3 * time.Second}
	for i, want := range tests {
		ep.RecordFailure(cfg, now)
		ep.RecordFailure(cfg, now)
		if got := ep.EjectedUntil().Sub(now); got != want {
			t.Fatalf("ejection %d lasted %v, want %v", i+2, got, want)
		}
		ep.SetHealthy(true, now.Add(time.Hour))
	}
	// A success resets the backoff.
	ep.RecordSuccess()
	ep.RecordFailure(cfg, now)
	ep.RecordFailure(cfg, now)
	if got := ep.EjectedUntil().Sub(now); got != time.Second {
		t.Fatalf("after a success the ejection lasted %v, want 1s", got)
	}
	if got := ep.TotalEjections(); got != 5 {
		t.Fatalf("TotalEjections = %d, want 5", got)
	}
}

func TestEjectionDisabled(t *testing.T) {
	ep := NewEndpoint("http://w", "")
	for range 10 {
		if ep.RecordFailure(Ejection{}, time.Now()) {
			t.Fatal("ejected with ejection disabled")
		}
	}
}

func TestPoolUpdate(t *testing.T) {
	p := New()
	var added, removed []string
	p.OnAdd = func(e *Endpoint) { added = append(added, e.URL) }
	p.OnRemove = func(e *Endpoint) { removed = append(removed, e.URL) }
	p.Update([]discovery.Target{{URL: "http://b"}, {URL: "http://a"}})
	a := p.Get("http://a")
	rel := a.Acquire()
	p.Update([]discovery.Target{{URL: "http://a"}, {URL: "http://c"}})
	if p.Get("http://a") != a || a.InFlight() != 1 {
		t.Fatal("a surviving endpoint lost its state across an update")
	}
	if p.Get("http://b") != nil {
		t.Fatal("removed endpoint still in the pool")
	}
	var urls []string
	for _, e := range p.All() {
		urls = append(urls, e.URL)
	}
	if len(urls) != 2 || urls[0] != "http://a" || urls[1] != "http://c" {
		t.Fatalf("All = %v, want [http://a http://c]", urls)
	}
	if len(added) != 3 || len(removed) != 1 || removed[0] != "http://b" {
		t.Fatalf("added %v removed %v", added, removed)
	}
	if a.Available() {
		t.Fatal("new endpoint available before its first health check")
	}
	rel()
	rel()
	if a.InFlight() != 0 {
		t.Fatalf("in-flight %d after release, want 0", a.InFlight())
	}
}

func TestModels(t *testing.T) {
	ep := NewEndpoint("http://w", "")
	if ep.Serves("m") || ep.Models() != nil {
		t.Fatal("serves a model before any fetch")
	}
	ep.SetModels([]string{"z", "m"})
	if !ep.Serves("m") || !ep.Serves("z") || ep.Serves("x") {
		t.Fatalf("Serves wrong for %v", ep.Models())
	}
}

// TestModelsChanged: the channel taken before a SetModels is closed by it;
// one taken after waits for the next.
func TestModelsChanged(t *testing.T) {
	ep := NewEndpoint("http://w", "")
	before := ep.ModelsChanged()
	if ep.ModelsChanged() != before {
		t.Fatal("two waits before one change got different channels")
	}
	ep.SetModels([]string{"m"})
	after := ep.ModelsChanged()
	for _, tc := range []struct {
		name   string
		ch     <-chan struct{}
		closed bool
	}{
		{"taken before SetModels", before, true},
		{"taken after SetModels", after, false},
	} {
		select {
		case <-tc.ch:
			if !tc.closed {
				t.Errorf("%s: closed, want open", tc.name)
			}
		default:
			if tc.closed {
				t.Errorf("%s: open, want closed", tc.name)
			}
		}
	}
}

func TestPendingPrefill(t *testing.T) {
	ep := NewEndpoint("http://w", "w")
	a := ep.StartPrefill(1000)
	b := ep.StartPrefill(24)
	none := ep.StartPrefill(0)
	if got := ep.PendingPrefill(); got != 1024 {
		t.Fatalf("pending %d, want 1024", got)
	}
	a()
	a() // a second call must not count the tokens down again
	none()
	if got := ep.PendingPrefill(); got != 24 {
		t.Fatalf("after one finished: pending %d, want 24", got)
	}
	b()
	if got := ep.PendingPrefill(); got != 0 {
		t.Fatalf("after both: pending %d, want 0", got)
	}
}

// TestEjectionShare: failures at every worker eject at most the configured
// share of a model's workers (at least one), and a worker of another
// model is bounded by its own model's fleet.
func TestEjectionShare(t *testing.T) {
	now := time.Unix(1000, 0)
	tests := []struct {
		name        string
		workers     int
		maxPercent  int
		wantEjected int
	}{
		{"half of three", 3, 50, 1},
		{"half of four", 4, 50, 2},
		{"one of one", 1, 50, 1},
		{"ten percent of five still one", 5, 10, 1},
		{"no bound", 3, 0, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := Ejection{ConsecutiveFailures: 1, BaseDuration: time.Minute, MaxEjectedPercent: tt.maxPercent}
			p := New()
			var targets []discovery.Target
			for i := range tt.workers {
				targets = append(targets, discovery.Target{URL: "http://w" + string(rune('a'+i))})
			}
			targets = append(targets, discovery.Target{URL: "http://other"})
			p.Update(targets)
			for _, ep := range p.All() {
				ep.SetHealthy(true, now)
				if ep.URL == "http://other" {
					ep.SetModels([]string{"m2"})
				} else {
					ep.SetModels([]string{"m"})
				}
			}
			// Every worker of m fails, twice over.
			for range 2 {
				for _, ep := range p.All() {
					if ep.URL != "http://other" {
						p.RecordFailure(ep, cfg, now)
					}
				}
			}
			ejected := 0
			for _, ep := range p.All() {
				if ep.URL != "http://other" && ep.Ejected() {
					ejected++
				}
			}
			if ejected != tt.wantEjected {
				t.Fatalf("%d of %d workers ejected, want %d", ejected, tt.workers, tt.wantEjected)
			}
			// m's ejections do not count against m2's lone worker.
			if !p.RecordFailure(p.Get("http://other"), cfg, now) {
				t.Fatal("the only worker of another model was not ejected")
			}
		})
	}
}
