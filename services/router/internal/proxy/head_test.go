package proxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/warmpath/warmpath/services/router/internal/discovery"
	"github.com/warmpath/warmpath/services/router/internal/limiter"
	"github.com/warmpath/warmpath/services/router/internal/metrics"
	"github.com/warmpath/warmpath/services/router/internal/pool"
	"github.com/warmpath/warmpath/services/router/internal/tokenizer"
	"github.com/warmpath/warmpath/services/router/kvindex"
	"github.com/warmpath/warmpath/services/router/strategy"
)

// prefills records the block keys kvaware passes on when a prefill ends.
type prefills struct {
	mu   sync.Mutex
	keys map[string]int
}

func (p *prefills) Prefilled(worker string, keys []uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.keys[worker] += len(keys)
}

// TestHeadRoutedDocumentIsMadeWhole: a long document no worker holds is
// routed on its head (tokenize_total{result="head"}), without waiting for
// the rest to be encoded; once it is, kvaware predicts the whole document
// on the chosen worker, so a second question sent while the first is still
// prefilling follows it there, and the prefill it hears of is the whole
// prompt's, not the head's.
func TestHeadRoutedDocumentIsMadeWhole(t *testing.T) {
	received := make(chan string, 8)
	release := make(chan struct{})
	p := workerPool(t, 4, func(self string, w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		received <- self
		<-release // prefilling until the test lets go
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"x","object":"text_completion","choices":[{"index":0,"text":"ok","finish_reason":"length"}]}`))
	})
	cfg := strategy.Defaults()
	cfg.Name = strategy.NameKVAware
	preds := strategy.NewPredictions()
	notes := &prefills{keys: map[string]int{}}
	s, err := strategy.New(cfg, strategy.WithIndex(kvindex.New(1<<14)), strategy.WithPredictions(preds), strategy.WithPrefillNotes(notes))
	if err != nil {
		t.Fatal(err)
	}
	tok := localTokenizer(t)
	lim := limiter.New(limiter.Config{})
	m := metrics.New(prometheus.NewRegistry(), p, lim.Stats)
	srv := New(Config{}, Deps{Pool: p, Limiter: lim, Metrics: m, Routing: &Routing{Strategy: s}})
	srv.SetTokenizer(tok)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Shutdown(time.Second) })
	// Registered last, so it runs first: held handlers let go before the
	// servers wait for them, also when the test fails.
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free)

	var doc strings.Builder
	for i := range 540 {
		fmt.Fprintf(&doc, "Document 1, line %d: routers and caches share prefixes of long prompts.\n", i)
	}
	send := func(question string) <-chan int {
		done := make(chan int, 1)
		body, _ := json.Marshal(map[string]any{"model": "m", "prompt": doc.String() + "Question: " + question, "max_tokens": 8})
		go func() {
			resp, err := http.Post("http://"+ln.Addr().String()+"/v1/completions", "application/json", bytes.NewReader(body))
			if err != nil {
				done <- 0
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			done <- resp.StatusCode
		}()
		return done
	}
	wait := func(what string) string {
		select {
		case u := <-received:
			return u
		case <-time.After(10 * time.Second):
			t.Fatalf("%s reached no worker", what)
			return ""
		}
	}

	first := send("what is cached?")
	holder := wait("the first question")
	if got := testutil.ToFloat64(m.Tokenize.WithLabelValues(metrics.TokenizeHead)); got != 1 {
		t.Fatalf("tokenize_total{result=head} = %v, want 1", got)
	}
	// The whole document (8K tokens: over 500 blocks of 16) is predicted
	// once its encoding is done, off the request's path.
	deadline := time.Now().Add(10 * time.Second)
	for preds.Len() < 500 {
		if time.Now().After(deadline) {
			t.Fatalf("%d blocks predicted, want the whole document's", preds.Len())
		}
		time.Sleep(5 * time.Millisecond)
	}
	second := send("and where is it routed?")
	if got := wait("the second question"); got != holder {
		t.Fatalf("the second question went to %s, the first (still prefilling) to %s", got, holder)
	}
	free()
	for _, done := range []<-chan int{first, second} {
		if code := <-done; code != http.StatusOK {
			t.Fatalf("status %d", code)
		}
	}
	notes.mu.Lock()
	defer notes.mu.Unlock()
	if n := notes.keys[holder]; n < 2*500 {
		t.Fatalf("prefills heard of at the holder: %d blocks over two questions, want two whole documents'", n)
	}
}

// workerPool starts n workers answering with handle (self is the worker's
// own URL) and returns a pool of them, healthy and serving model "m".
func workerPool(tb testing.TB, n int, handle func(self string, w http.ResponseWriter, r *http.Request)) *pool.Pool {
	tb.Helper()
	p := pool.New()
	var targets []discovery.Target
	for range n {
		var up *httptest.Server
		up = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { handle(up.URL, w, r) }))
		tb.Cleanup(up.Close)
		targets = append(targets, discovery.Target{URL: up.URL})
	}
	p.Update(targets)
	for _, tg := range targets {
		ep := p.Get(tg.URL)
		ep.SetHealthy(true, time.Now())
		ep.SetModels([]string{"m"})
	}
	return p
}

// localTokenizer encodes model "m" in-process with cl100k_base.
func localTokenizer(tb testing.TB) *tokenizer.Client {
	tb.Helper()
	local, err := tokenizer.ParseLocal("m=cl100k_base")
	if err != nil {
		tb.Fatal(err)
	}
	tok, err := tokenizer.New(tokenizer.Config{Local: local})
	if err != nil {
		tb.Fatal(err)
	}
	return tok
}
