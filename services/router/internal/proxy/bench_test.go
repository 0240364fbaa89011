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
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmpath/warmpath/services/router/internal/discovery"
	"github.com/warmpath/warmpath/services/router/internal/limiter"
	"github.com/warmpath/warmpath/services/router/internal/metrics"
	"github.com/warmpath/warmpath/services/router/internal/pool"
	"github.com/warmpath/warmpath/services/router/kvindex"
	"github.com/warmpath/warmpath/services/router/strategy"
)

// BenchmarkProxyCompletion measures the router's own cost per non-streamed
// completion with an 8 KB prompt against a trivial upstream on loopback.
func BenchmarkProxyCompletion(b *testing.B) {
	reply := []byte(`{"id":"x","object":"text_completion","choices":[{"index":0,"text":"ok","finish_reason":"length"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(reply)
	}))
	defer up.Close()
	p := pool.New()
	p.Update([]discovery.Target{{URL: up.URL}})
	ep := p.Get(up.URL)
	ep.SetHealthy(true, time.Now())
	ep.SetModels([]string{"m"})
	s, _ := strategy.New(strategy.Defaults())
	lim := limiter.New(limiter.Config{})
	m := metrics.New(prometheus.NewRegistry(), p, lim.Stats)
	srv := New(Config{}, Deps{Pool: p, Limiter: lim, Metrics: m, Routing: &Routing{Strategy: s}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Shutdown(time.Second)
	routerURL := "http://" + ln.Addr().String()
	body := []byte(`{"model":"m","prompt":"` + strings.Repeat("lorem ipsum ", 680) + `","max_tokens":16}`)
	client := &http.Client{}
	b.SetBytes(int64(len(body)))
	b.ResetTimer()
	for range b.N {
		resp, err := client.Post(routerURL+"/v1/completions", "application/json", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatal(resp.StatusCode)
		}
	}
}

// BenchmarkHeadRoutedDocument measures the router's own time before a
// worker has a long document nothing caches (a new 8K-token one each
// time): kvaware routes it on its head while the whole is encoded for the
// predictions; round robin, which reads no prompt, is the floor. route-µs
// is from the client's send to the worker's handler, the part of the
// document's time to first token that is the router's; the workers hold
// each answer 20 ms, a prefill's stand-in.
func BenchmarkHeadRoutedDocument(b *testing.B) {
	for _, name := range []string{strategy.NameRoundRobin, strategy.NameKVAware} {
		b.Run(name, func(b *testing.B) { benchHeadRouted(b, name) })
	}
}

func benchHeadRouted(b *testing.B, name string) {
	arrived := make(chan time.Time, 1)
	p := workerPool(b, 4, func(_ string, w http.ResponseWriter, r *http.Request) {
		arrived <- time.Now()
		_, _ = io.Copy(io.Discard, r.Body)
		time.Sleep(20 * time.Millisecond)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"x","object":"text_completion","choices":[{"index":0,"text":"ok","finish_reason":"length"}]}`))
	})
	cfg := strategy.Defaults()
	cfg.Name = name
	s, err := strategy.New(cfg, strategy.WithIndex(kvindex.New(1<<20)))
	if err != nil {
		b.Fatal(err)
	}
	lim := limiter.New(limiter.Config{})
	srv := New(Config{}, Deps{Pool: p, Limiter: lim, Metrics: metrics.New(prometheus.NewRegistry(), p, lim.Stats), Routing: &Routing{Strategy: s}})
	srv.SetTokenizer(localTokenizer(b))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	b.Cleanup(func() { srv.Shutdown(time.Second) })
	url := "http://" + ln.Addr().String() + "/v1/completions"
	var routed time.Duration
	i := 0
	for b.Loop() {
		b.StopTimer()
		i++
		var doc strings.Builder
		for l := range 540 {
			fmt.Fprintf(&doc, "Document %d, line %d: routers and caches share prefixes of long prompts.\n", i, l)
		}
		body, _ := json.Marshal(map[string]any{"model": "m", "prompt": doc.String() + "Question: what is cached?", "max_tokens": 8})
		b.StartTimer()
		sent := time.Now()
		resp, err := http.Post(url, "application/json", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatal(resp.StatusCode)
		}
		routed += (<-arrived).Sub(sent)
	}
	b.ReportMetric(float64(routed.Microseconds())/float64(b.N), "route-µs")
}
