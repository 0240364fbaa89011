package proxy

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/warmpath/warmpath/libs/testwait"
	"github.com/warmpath/warmpath/services/router/internal/discovery"
	"github.com/warmpath/warmpath/services/router/strategy"
)

// removingStrategy is prefixaware with a pool change landing while it
// picks: once armed, its next Pick first runs remove (the workers leave
// the pool and the router forgets them, as the app's OnRemove does), then
// picks among the workers of the request's snapshot, taken before.
type removingStrategy struct {
	*strategy.PrefixAware
	mu     sync.Mutex
	remove func()
}

func (s *removingStrategy) arm(remove func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.remove = remove
}

func (s *removingStrategy) Pick(req *strategy.Request, eps []strategy.Endpoint) (strategy.Decision, error) {
	s.mu.Lock()
	remove := s.remove
	s.remove = nil
	s.mu.Unlock()
	if remove != nil {
		remove()
	}
	return s.PrefixAware.Pick(req, eps)
}

// TestScaleDownDrainsAndForgets: a worker leaving the pool, as one does
// when a scale-down marks its EndpointSlice endpoint terminating, gets no
// new requests, the request it is serving finishes, and the router keeps
// no cache knowledge of it, also when it leaves while a request is being
// routed on a snapshot of the workers that still holds it.
func TestScaleDownDrainsAndForgets(t *testing.T) {
	s, err := strategy.New(strategy.Defaults())
	if err != nil {
		t.Fatal(err)
	}
	pa, isPA := s.(*strategy.PrefixAware)
	if !isPA {
		t.Fatalf("default strategy %T, want prefixaware", s)
	}
	rs := &removingStrategy{PrefixAware: pa}
	release := make(chan struct{})
	// The prompt "slow" holds its worker until release.
	gate := func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if gjson.GetBytes(b, "prompt").String() == "slow" {
			<-release
		}
		ok(w, r)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := startFleetWith(t, ln, productionConfig(), fleetOptions{strategy: rs}, gate, gate, gate)
	// keep returns a pool change to urls that forgets the workers leaving,
	// as the app's OnRemove does.
	keep := func(urls ...string) func() {
		return func() {
			before := map[string]bool{}
			for _, ep := range f.pool.All() {
				before[ep.URL] = true
			}
			var ts []discovery.Target
			for _, u := range urls {
				ts = append(ts, discovery.Target{URL: u})
				delete(before, u)
			}
			f.pool.Update(ts)
			for u := range before {
				f.srv.Forget(u)
				rs.Forget(u)
			}
		}
	}

	slow := make(chan int, 1)
	go func() {
		resp, err := http.Post(f.url+"/v1/completions", "application/json", strings.NewReader(`{"model":"m","prompt":"slow","max_tokens":1}`))
		if err != nil {
			slow <- -1
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		slow <- resp.StatusCode
	}()
	testwait.For(t, 10*time.Second, "the slow request reaching a worker", func() bool { return f.hits() == 1 })
	var busy *testWorker
	var rest []string
	for _, w := range f.workers {
		if w.hits.Load() == 1 {
			busy = w
		} else {
			rest = append(rest, w.URL)
		}
	}
	keep(rest...)()

	long := strings.Repeat("a shared system prompt long enough for several chunks. ", 40)
	for i := range 6 {
		if code := f.post(t, fmt.Sprintf("%s question %d", long, i)); code != http.StatusOK {
			t.Fatalf("request %d after the scale-down: status %d", i, code)
		}
	}
	if n := busy.hits.Load(); n != 1 {
		t.Fatalf("the departed worker got %d requests, want only the one it had before leaving", n)
	}
	close(release)
	select {
	case code := <-slow:
		if code != http.StatusOK {
			t.Fatalf("the departed worker's in-flight request ended with %d, want 200", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the departed worker's in-flight request never finished")
	}
	if k, held := pa.CacheKnowledge()[busy.URL]; held {
		t.Fatalf("prefixaware still holds %d chunks of the departed worker", k.Chunks)
	}

	// The remaining workers leave while the next request is picked on a
	// snapshot that still lists them: the pick must not leave knowledge
	// of a worker that is gone.
	rs.arm(keep())
	if code := f.post(t, long+" after everyone left"); code == http.StatusOK {
		t.Fatalf("a request with no worker left got 200")
	}
	if k := pa.CacheKnowledge(); len(k) != 0 {
		t.Fatalf("prefixaware holds knowledge of departed workers %v, want none", k)
	}
}
