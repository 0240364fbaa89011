package live

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Counters are the worker metrics a run reads, summed over label sets.
type Counters map[string]float64

// Metrics the report reads from each worker, with vLLM's and LMCache's
// names.
const (
	PrefixQueries   = "vllm:prefix_cache_queries_total"
	PrefixHits      = "vllm:prefix_cache_hits_total"
	ExternalHits    = "vllm:external_prefix_cache_hits_total"
	RequestsServed  = "vllm:request_success_total"
	RemoteReadBytes = "lmcache:num_remote_read_bytes_total"
	LMCacheHits     = "lmcache:num_hit_tokens_total"
)

var scraped = []string{PrefixQueries, PrefixHits, ExternalHits, RequestsServed, RemoteReadBytes, LMCacheHits}

// Scrape reads each worker's /metrics (base URLs, e.g. http://127.0.0.1:8101).
func Scrape(ctx context.Context, workers []string) (map[string]Counters, error) {
	client := &http.Client{Timeout: 5 * time.Second}
	out := make(map[string]Counters, len(workers))
	for _, w := range workers {
		c, err := scrapeOne(ctx, client, w+"/metrics")
		if err != nil {
			return nil, err
		}
		out[w] = c
	}
	return out, nil
}

func scrapeOne(ctx context.Context, client *http.Client, url string) (Counters, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: status %d", url, resp.StatusCode)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	c := Counters{}
	for _, name := range scraped {
		f, ok := fams[name]
		if !ok {
			// The parser keys counters by their family name, without _total.
			f, ok = fams[trimTotal(name)]
		}
		if !ok {
			continue
		}
		for _, m := range f.GetMetric() {
			c[name] += m.GetCounter().GetValue()
		}
	}
	return c, nil
}

func trimTotal(s string) string {
	const suffix = "_total"
	if len(s) > len(suffix) && s[len(s)-len(suffix):] == suffix {
		return s[:len(s)-len(suffix)]
	}
	return s
}

// Delta is after minus before, per worker and metric.
func Delta(before, after map[string]Counters) map[string]Counters {
	out := make(map[string]Counters, len(after))
	for w, a := range after {
		d := Counters{}
		for k, v := range a {
			d[k] = v - before[w][k]
		}
		out[w] = d
	}
	return out
}
