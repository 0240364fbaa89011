package proxy

import (
	"bytes"
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
