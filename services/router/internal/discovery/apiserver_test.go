package discovery

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	discoveryclient "k8s.io/client-go/kubernetes/typed/discovery/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// The Kubernetes source is tested against a real kube-apiserver and etcd
// (envtest), started once for the package on first use.
var (
	envOnce  sync.Once
	env      *envtest.Environment
	envCfg   *rest.Config
	envErr   error
	nsSerial atomic.Int32
)

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard())
	code := m.Run()
	if env != nil {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "envtest stop:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// apiServer returns an admin config for the shared envtest API server,
// starting it on first use. A missing KUBEBUILDER_ASSETS fails the test:
// skipping would hide that the Kubernetes source went untested.
func apiServer(t *testing.T) *rest.Config {
	t.Helper()
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set; this test needs a real kube-apiserver and etcd. " +
			"Build them once (minutes, cached outside the repo) and point the variable at them: " +
			`export KUBEBUILDER_ASSETS="$(scripts/install-envtest.sh)" from the repository root, ` +
			"or run make test-unit, which does that")
	}
	for _, bin := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(assets + "/" + bin); err != nil {
			t.Fatalf("KUBEBUILDER_ASSETS=%s has no %s (%v); rebuild with scripts/install-envtest.sh", assets, bin, err)
		}
	}
	envOnce.Do(func() {
		env = &envtest.Environment{ControlPlaneStartTimeout: 2 * time.Minute}
		envCfg, envErr = env.Start()
		if envErr != nil {
			env = nil
		}
	})
	if envErr != nil {
		t.Fatalf("starting kube-apiserver and etcd from %s: %v", assets, envErr)
	}
	return rest.CopyConfig(envCfg)
}

// newNamespace creates a namespace of the test's own.
func newNamespace(t *testing.T, c kubernetes.Interface) string {
	t.Helper()
	name := fmt.Sprintf("discovery-%d", nsSerial.Add(1))
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := c.CoreV1().Namespaces().Create(t.Context(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return name
}

// startKubernetes runs a Kubernetes source for service "workers" in ns,
// with a client built from cfg, until the test ends.
// Logs go to log (nil: discarded).
func startKubernetes(t *testing.T, cfg *rest.Config, ns string, log *slog.Logger) *recorder {
	t.Helper()
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	src, err := NewKubernetes(KubernetesConfig{
		Client: client, Namespace: ns, Selector: discoveryv1.LabelServiceName + "=workers", Port: "http",
		Log: cmp.Or(log, slog.New(slog.DiscardHandler)),
	})
	if err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	runSource(t, src, rec)
	return rec
}

func TestKubernetesEndpointSlices(t *testing.T) {
	cfg := apiServer(t)
	admin := kubernetes.NewForConfigOrDie(cfg)
	ns := newNamespace(t, admin)
	otherNS := newNamespace(t, admin)
	api := clientSlices{admin.DiscoveryV1().EndpointSlices(ns)}
	apiOther := clientSlices{admin.DiscoveryV1().EndpointSlices(otherNS)}

	steps := []struct {
		name   string
		change func(t *testing.T)
		want   []Target
	}{
		{
			name:   "no slices yet",
			change: func(t *testing.T) {},
			want:   targets(),
		},
		{
			name: "slice with two ready endpoints",
			change: func(t *testing.T) {
				api.create(t, endpointSlice(ns, "a", "workers",
					endpoint("10.0.0.1", "pod-a1", yes, nil), endpoint("10.0.0.2", "pod-a2", yes, nil)))
			},
			want: targets("http://10.0.0.1:8000 pod-a1", "http://10.0.0.2:8000 pod-a2"),
		},
		{
			name: "endpoint marked not ready leaves",
			change: func(t *testing.T) {
				api.update(t, "a", func(s *discoveryv1.EndpointSlice) { s.Endpoints[1].Conditions.Ready = no })
			},
			want: targets("http://10.0.0.1:8000 pod-a1"),
		},
		{
			name: "second slice adds its ready, non-terminating endpoints",
			change: func(t *testing.T) {
				api.create(t, endpointSlice(ns, "b", "workers",
					endpoint("10.0.1.1", "pod-b1", nil, nil),
					endpoint("10.0.1.2", "pod-b2", yes, yes),
					endpoint("10.0.1.3", "pod-b3", yes, no)))
			},
			want: targets("http://10.0.0.1:8000 pod-a1", "http://10.0.1.1:8000 pod-b1", "http://10.0.1.3:8000 pod-b3"),
		},
		{
			// The ready flip is the barrier: once it shows, the slices
			// created before it would have shown too.
			name: "slices of another service or namespace are ignored",
			change: func(t *testing.T) {
				api.create(t, endpointSlice(ns, "other", "not-workers", endpoint("10.0.2.1", "x", yes, nil)))
				apiOther.create(t, endpointSlice(otherNS, "a", "workers", endpoint("10.0.3.1", "y", yes, nil)))
				api.update(t, "a", func(s *discoveryv1.EndpointSlice) { s.Endpoints[1].Conditions.Ready = yes })
			},
			want: targets("http://10.0.0.1:8000 pod-a1", "http://10.0.0.2:8000 pod-a2",
				"http://10.0.1.1:8000 pod-b1", "http://10.0.1.3:8000 pod-b3"),
		},
		{
			name:   "deleted slice's endpoints leave at once",
			change: func(t *testing.T) { api.delete(t, "b") },
			want:   targets("http://10.0.0.1:8000 pod-a1", "http://10.0.0.2:8000 pod-a2"),
		},
		{
			name: "endpoint removed from a slice leaves",
			change: func(t *testing.T) {
				api.update(t, "a", func(s *discoveryv1.EndpointSlice) { s.Endpoints = s.Endpoints[1:] })
			},
			want: targets("http://10.0.0.2:8000 pod-a2"),
		},
		{
			name: "slice relabelled away leaves",
			change: func(t *testing.T) {
				api.update(t, "a", func(s *discoveryv1.EndpointSlice) { s.Labels[discoveryv1.LabelServiceName] = "not-workers" })
			},
			want: targets(),
		},
		{
			name: "slice relabelled back returns",
			change: func(t *testing.T) {
				api.update(t, "other", func(s *discoveryv1.EndpointSlice) { s.Labels[discoveryv1.LabelServiceName] = "workers" })
			},
			want: targets("http://10.0.2.1:8000 x"),
		},
		{
			// What the EndpointSlice controller writes for a pod being
			// deleted (a scale-down): still serving through its preStop,
			// but terminating, so it must get no new requests.
			name: "endpoint of a pod being deleted leaves",
			change: func(t *testing.T) {
				api.update(t, "other", func(s *discoveryv1.EndpointSlice) {
					s.Endpoints[0].Conditions = discoveryv1.EndpointConditions{Ready: no, Serving: yes, Terminating: yes}
				})
			},
			want: targets(),
		},
	}
	rec := startKubernetes(t, cfg, ns, nil)
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			start := time.Now()
			st.change(t)
			rec.waitFor(t, st.want, 10*time.Second)
			t.Logf("reported after %v", time.Since(start).Round(time.Millisecond))
		})
	}
}

// TestKubernetesWatchReconnect cuts the source's watch in the three ways
// client-go reconnects, deletes and changes slices while the source is
// disconnected, and checks that once it is back nothing deleted meanwhile
// survives and nothing added is missing.
func TestKubernetesWatchReconnect(t *testing.T) {
	tests := []struct {
		name        string
		mode        cutMode
		wantRelist  bool // the source must have listed again
		wantResumed bool // the source must have resumed its watch
	}{
		// A broken stream makes the reflector relist: the store is
		// replaced and the slice deleted meanwhile arrives as a
		// DeletedFinalStateUnknown tombstone.
		{name: "stream broken, relist", mode: cutError, wantRelist: true},
		// A stream the server ends cleanly (its timeout) is resumed from
		// the last resource version; the deletion arrives as an event.
		{name: "stream closed, watch resumed", mode: cutEOF, wantResumed: true},
		// A resume from a compacted version gets 410 Gone and relists.
		{name: "stream closed, resume refused with 410 Gone, relist", mode: cutEOFThenGone, wantRelist: true, wantResumed: true},
	}
	cfg := apiServer(t)
	admin := kubernetes.NewForConfigOrDie(cfg)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ns := newNamespace(t, admin)
			api := clientSlices{admin.DiscoveryV1().EndpointSlices(ns)}
			api.create(t, endpointSlice(ns, "a", "workers", endpoint("10.0.0.1", "pod-a1", yes, nil)))
			api.create(t, endpointSlice(ns, "b", "workers", endpoint("10.0.1.1", "pod-b1", yes, nil), endpoint("10.0.1.2", "pod-b2", yes, nil)))
			api.create(t, endpointSlice(ns, "c", "workers", endpoint("10.0.2.1", "pod-c1", yes, nil)))

			link := &cuttableNet{}
			srcCfg := rest.CopyConfig(cfg)
			srcCfg.Wrap(link.wrap)
			logs := &lockedBuffer{}
			rec := startKubernetes(t, srcCfg, ns, slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
			last := targets("http://10.0.0.1:8000 pod-a1", "http://10.0.1.1:8000 pod-b1",
				"http://10.0.1.2:8000 pod-b2", "http://10.0.2.1:8000 pod-c1")
			rec.waitFor(t, last, 10*time.Second)

			// Each round changes slices while the source is cut off.
			rounds := []struct {
				name    string
				change  func()
				deleted string // a slice the round deletes
				want    []Target
			}{
				{
					name: "delete, change and add",
					change: func() {
						api.delete(t, "b")
						api.update(t, "c", func(s *discoveryv1.EndpointSlice) { s.Endpoints[0].Conditions.Ready = no })
						api.create(t, endpointSlice(ns, "d", "workers", endpoint("10.0.3.1", "pod-d1", yes, nil)))
					},
					deleted: "b",
					want:    targets("http://10.0.0.1:8000 pod-a1", "http://10.0.3.1:8000 pod-d1"),
				},
				{
					// The relist is empty: only tombstones say what left.
					name:    "delete every slice",
					change:  func() { api.delete(t, "a"); api.delete(t, "c"); api.delete(t, "d") },
					deleted: "a",
					want:    targets(),
				},
			}
			for _, r := range rounds {
				// client-go treats a watch that ends within a second
				// without events as broken (and relists); let it age.
				time.Sleep(1200 * time.Millisecond)
				before := link.cut(t, tt.mode)
				r.change()
				// While cut off the source cannot know: the set stays.
				time.Sleep(500 * time.Millisecond)
				if n, got := rec.latest(); !slices.Equal(got, last) {
					t.Fatalf("%s, while cut off: got %v (%d updates), want %v", r.name, got, n, last)
				}
				link.restore()
				rec.waitFor(t, r.want, 10*time.Second)
				last = r.want

				after := link.stats()
				if got := after.relists - before.relists; (got > 0) != tt.wantRelist {
					t.Errorf("%s: got %d relists after the cut, want relist %v", r.name, got, tt.wantRelist)
				}
				if got := after.resumed - before.resumed; (got > 0) != tt.wantResumed {
					t.Errorf("%s: got %d resumed watches after the cut, want resumed %v", r.name, got, tt.wantResumed)
				}
				wantRefused := 0
				if tt.mode == cutEOFThenGone {
					wantRefused = 1
				}
				if got := after.refused - before.refused; got != wantRefused {
					t.Errorf("%s: got %d watches refused with 410, want %d", r.name, got, wantRefused)
				}
				// A relist reports what was deleted meanwhile as tombstones
				// (logged around when the set is reported: allow a moment).
				line := `deleted while the watch was down" key=` + ns + "/" + r.deleted + "\n"
				tombstone := strings.Contains(logs.String(), line)
				for deadline := time.Now().Add(2 * time.Second); tt.wantRelist && !tombstone && time.Now().Before(deadline); {
					time.Sleep(10 * time.Millisecond)
					tombstone = strings.Contains(logs.String(), line)
				}
				if tombstone != tt.wantRelist {
					t.Errorf("%s: got tombstone for slice %s logged %v, want %v; logs:\n%s",
						r.name, r.deleted, tombstone, tt.wantRelist, logs)
				}
			}
		})
	}
}

// cutMode is how cuttableNet ends the open watches.
type cutMode int

const (
	cutError       cutMode = iota // the stream fails mid-read
	cutEOF                        // the stream ends cleanly, as at the server's watch timeout
	cutEOFThenGone                // cutEOF, and the resumed watch gets 410 Gone
)

// cuttableNet sits under a client's transport. cut ends every open watch
// and holds new requests until restore.
type cuttableNet struct {
	mu      sync.Mutex
	held    chan struct{} // closed by restore; nil when not cut
	watches []openWatch   // guarded by mu
	gone    bool          // refuse the next resumed watch with 410; guarded by mu
	n       netStats      // guarded by mu
}

// netStats counts requests by kind.
type netStats struct {
	relists int // lists and watch-lists (sendInitialEvents=true)
	resumed int // watches from a resource version
	refused int // watches refused with 410
}

// openWatch is one watch request under cuttableNet.
type openWatch struct {
	cancel context.CancelFunc
	eof    *atomic.Bool  // the body reports io.EOF once cut
	done   chan struct{} // closed once the request failed or its body was closed
	once   *sync.Once
}

func (w openWatch) finish() { w.once.Do(func() { close(w.done) }) }

func (n *cuttableNet) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		n.mu.Lock()
		held := n.held
		n.mu.Unlock()
		if held != nil {
			select {
			case <-held:
			case <-req.Context().Done():
				return nil, req.Context().Err()
			}
		}
		q := req.URL.Query()
		isWatch := q.Get("watch") == "true" || q.Get("watch") == "1"
		n.mu.Lock()
		switch {
		case !isWatch || q.Get("sendInitialEvents") == "true":
			n.n.relists++
		case q.Get("resourceVersion") != "" && q.Get("resourceVersion") != "0":
			n.n.resumed++
			if n.gone {
				n.gone = false
				n.n.refused++
				n.mu.Unlock()
				return gone(req), nil
			}
		}
		if !isWatch {
			n.mu.Unlock()
			return rt.RoundTrip(req)
		}
		ctx, cancel := context.WithCancel(req.Context())
		w := openWatch{cancel: cancel, eof: new(atomic.Bool), done: make(chan struct{}), once: new(sync.Once)}
		n.watches = append(n.watches, w)
		n.mu.Unlock()
		resp, err := rt.RoundTrip(req.WithContext(ctx))
		if err != nil {
			w.finish()
			return nil, err
		}
		resp.Body = watchBody{resp.Body, w}
		return resp, nil
	})
}

// watchBody is a watch response body that cut can end: its read error is
// io.EOF when cut in an EOF mode, and closing it finishes the watch.
type watchBody struct {
	io.ReadCloser
	w openWatch
}

func (b watchBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && b.w.eof.Load() {
		return n, io.EOF
	}
	return n, err
}

func (b watchBody) Close() error {
	defer b.w.finish()
	return b.ReadCloser.Close()
}

// cut ends every open watch as mode says, waits until client-go has
// closed them (so no event sent after cut returns can reach the source),
// and holds new requests until restore. It returns the counts so far.
func (n *cuttableNet) cut(t *testing.T, mode cutMode) netStats {
	t.Helper()
	n.mu.Lock()
	n.held = make(chan struct{})
	n.gone = mode == cutEOFThenGone
	cut := n.watches
	n.watches = nil
	stats := n.n
	n.mu.Unlock()
	for _, w := range cut {
		w.eof.Store(mode != cutError)
		w.cancel()
	}
	for _, w := range cut {
		select {
		case <-w.done:
		case <-time.After(10 * time.Second):
			t.Fatal("a cut watch was not closed within 10s")
		}
	}
	return stats
}

func (n *cuttableNet) restore() {
	n.mu.Lock()
	defer n.mu.Unlock()
	close(n.held)
	n.held = nil
}

func (n *cuttableNet) stats() netStats {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.n
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// gone is the API server's answer to a watch from a compacted version.
func gone(req *http.Request) *http.Response {
	body := `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",` +
		`"message":"too old resource version","reason":"Expired","code":410}`
	return &http.Response{
		StatusCode: http.StatusGone, Status: "410 Gone", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:  http.Header{"Content-Type": []string{"application/json"}},
		Body:    io.NopCloser(strings.NewReader(body)),
		Request: req, ContentLength: int64(len(body)),
	}
}

// clientSlices wraps the typed client with helpers that fail the test.
type clientSlices struct {
	c discoveryclient.EndpointSliceInterface
}

func (s clientSlices) create(t *testing.T, es *discoveryv1.EndpointSlice) {
	t.Helper()
	if _, err := s.c.Create(t.Context(), es, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create EndpointSlice %s: %v", es.Name, err)
	}
}

func (s clientSlices) update(t *testing.T, name string, change func(*discoveryv1.EndpointSlice)) {
	t.Helper()
	es, err := s.c.Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get EndpointSlice %s: %v", name, err)
	}
	change(es)
	if _, err := s.c.Update(t.Context(), es, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update EndpointSlice %s: %v", name, err)
	}
}

func (s clientSlices) delete(t *testing.T, name string) {
	t.Helper()
	if err := s.c.Delete(t.Context(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete EndpointSlice %s: %v", name, err)
	}
}
