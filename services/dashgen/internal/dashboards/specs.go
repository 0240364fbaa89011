// Package dashboards defines warmpath's Grafana dashboards as data — each
// panel's title, description, unit and PromQL — and builds them with the
// Grafana Foundation SDK. The same specs feed the validation tests, so a
// query is checked exactly as it ships.
package dashboards

// Kind is a panel's visualisation.
type Kind int

// Panel kinds.
const (
	TimeSeries Kind = iota
	Stat
)

// Query is one PromQL expression of a panel and its legend.
type Query struct {
	Expr   string
	Legend string
}

// Panel is one panel.
type Panel struct {
	Title       string
	Description string
	Unit        string
	Kind        Kind
	Queries     []Query
	// Width in grid units (24 = full); 0 means 12.
	Width int
	// Min and Max bound the axis when set (ratios: 0..1).
	Min, Max *float64
}

// Row groups panels under a heading.
type Row struct {
	Title  string
	Panels []Panel
}

// Dashboard is one dashboard.
type Dashboard struct {
	UID, Title, Description string
	// File is the JSON file name under dashboards/.
	File string
	Rows []Row
}

// Label matchers every query carries. Prometheus adds namespace (and the
// ServiceMonitors the endpoint label) to each scraped series; the
// dashboard variables choose among them. vLLM and LMCache series also
// carry model_name.
const (
	sel      = `namespace=~"$namespace", endpoint=~"$endpoint"`
	selModel = `namespace=~"$namespace", endpoint=~"$endpoint", model_name=~"$model"`
	rate     = `[$__rate_interval]`
)

func f(v float64) *float64 { return &v }

// quantiles are the usual latency quantiles of a histogram.
func quantiles(metric, selector, who string) []Query {
	var qs []Query
	for _, q := range []struct{ v, name string }{{"0.5", "p50"}, {"0.9", "p90"}, {"0.99", "p99"}} {
		qs = append(qs, Query{
			Expr:   "histogram_quantile(" + q.v + ", sum by (le) (rate(" + metric + "_bucket{" + selector + "}" + rate + ")))",
			Legend: who + " " + q.name,
		})
	}
	return qs
}

// All returns warmpath's dashboards.
func All() []Dashboard {
	return []Dashboard{overview(), kvCache(), routing()}
}

func overview() Dashboard {
	ttft := append(quantiles("warmpath_router_ttft_seconds", sel, "router"), quantiles("vllm:time_to_first_token_seconds", selModel, "workers")...)
	e2e := append(quantiles("warmpath_router_request_duration_seconds", sel, "router"), quantiles("vllm:e2e_request_latency_seconds", selModel, "workers")...)
	return Dashboard{
		UID: "warmpath-overview", Title: "warmpath / Overview", File: "overview.json",
		Description: "Traffic, latency and throughput of warmpath endpoints: what clients see through the router, next to what the workers report.",
		Rows: []Row{
			{Title: "Now", Panels: []Panel{
				{Title: "TTFT p90", Kind: Stat, Unit: "s", Width: 6,
					Description: "Time to first token at the router, 90th percentile over the selected range's rate window.",
					Queries:     []Query{{Expr: "histogram_quantile(0.9, sum by (le) (rate(warmpath_router_ttft_seconds_bucket{" + sel + "}" + rate + ")))"}}},
				{Title: "Prefix cache hit rate", Kind: Stat, Unit: "percentunit", Width: 6, Min: f(0), Max: f(1),
					Description: "Share of prompt tokens the workers' GPU prefix caches served (vllm:prefix_cache_hits / queries).",
					Queries:     []Query{{Expr: "sum(rate(vllm:prefix_cache_hits_total{" + selModel + "}" + rate + ")) / sum(rate(vllm:prefix_cache_queries_total{" + selModel + "}" + rate + "))"}}},
				{Title: "Output throughput", Kind: Stat, Unit: "tokens/s", Width: 6,
					Description: "Generated tokens per second across the selected workers.",
					Queries:     []Query{{Expr: "sum(rate(vllm:generation_tokens_total{" + selModel + "}" + rate + "))"}}},
				{Title: "Healthy workers", Kind: Stat, Unit: "none", Width: 6,
					Description: "Workers passing the router's health checks and not ejected.",
					Queries:     []Query{{Expr: "sum(warmpath_router_worker_healthy{" + sel + "})"}}},
			}},
			{Title: "Traffic", Panels: []Panel{
				{Title: "Requests by status", Unit: "reqps",
					Description: "Requests the router answered, by HTTP status (499: the client left).",
					Queries:     []Query{{Expr: "sum by (code) (rate(warmpath_router_requests_total{" + sel + "}" + rate + "))", Legend: "{{code}}"}}},
				{Title: "Error rate", Unit: "percentunit", Min: f(0),
					Description: "Share of requests answered with a 5xx status.",
					Queries:     []Query{{Expr: "(sum(rate(warmpath_router_requests_total{" + sel + `, code=~"5.."}` + rate + ")) or vector(0)) / sum(rate(warmpath_router_requests_total{" + sel + "}" + rate + "))", Legend: "5xx share"}}},
			}},
			{Title: "Latency", Panels: []Panel{
				{Title: "Time to first token", Unit: "s",
					Description: "TTFT measured by the router (arrival to first response byte) and reported by the workers (vllm:time_to_first_token_seconds), side by side: the gap is queueing and routing.",
					Queries:     ttft},
				{Title: "End-to-end latency", Unit: "s",
					Description: "Whole-request latency at the router and at the workers.",
					Queries:     e2e},
			}},
			{Title: "Workers", Panels: []Panel{
				{Title: "Output tokens per second", Unit: "tokens/s",
					Description: "Generated tokens per second, per worker.",
					Queries:     []Query{{Expr: "sum by (instance) (rate(vllm:generation_tokens_total{" + selModel + "}" + rate + "))", Legend: "{{instance}}"}}},
				{Title: "Running and queued requests", Unit: "none",
					Description: "Requests each worker is running and holding in its queue (vllm:num_requests_running, _waiting).",
					Queries: []Query{
						{Expr: "sum by (instance) (vllm:num_requests_running{" + selModel + "})", Legend: "{{instance}} running"},
						{Expr: "sum by (instance) (vllm:num_requests_waiting{" + selModel + "})", Legend: "{{instance}} waiting"},
					}},
			}},
		},
	}
}

func kvCache() Dashboard {
	return Dashboard{
		UID: "warmpath-kv-cache", Title: "warmpath / KV cache", File: "kv-cache.json",
		Description: "The tiered KV cache: GPU prefix caches, LMCache's CPU tier (L1) and the warmpath cache server (L2).",
		Rows: []Row{
			{Title: "GPU and LMCache (workers)", Panels: []Panel{
				{Title: "GPU prefix cache hit rate", Unit: "percentunit", Min: f(0), Max: f(1),
					Description: "Share of prompt tokens served from each worker's GPU prefix cache.",
					Queries:     []Query{{Expr: "sum by (instance) (rate(vllm:prefix_cache_hits_total{" + selModel + "}" + rate + ")) / sum by (instance) (rate(vllm:prefix_cache_queries_total{" + selModel + "}" + rate + "))", Legend: "{{instance}}"}}},
				{Title: "LMCache lookup hit rate", Unit: "percentunit", Min: f(0), Max: f(1),
					Description: "Share of looked-up tokens LMCache found (lmcache:num_lookup_hits / num_lookup_tokens).",
					Queries:     []Query{{Expr: "sum by (instance) (rate(lmcache:num_lookup_hits_total{" + selModel + "}" + rate + ")) / sum by (instance) (rate(lmcache:num_lookup_tokens_total{" + selModel + "}" + rate + "))", Legend: "{{instance}}"}}},
				{Title: "Tokens served from LMCache", Unit: "tokens/s",
					Description: "Prompt tokens vLLM took from LMCache instead of computing them.",
					Queries:     []Query{{Expr: "sum by (instance) (rate(lmcache:num_vllm_hit_tokens_total{" + selModel + "}" + rate + "))", Legend: "{{instance}}"}}},
				{Title: "Per-request LMCache hit rate", Unit: "percentunit", Min: f(0), Max: f(1),
					Description: "Quantiles of the share of each request's tokens LMCache held (lmcache:request_cache_hit_rate).",
					Queries: []Query{
						{Expr: "histogram_quantile(0.5, sum by (le) (rate(lmcache:request_cache_hit_rate_bucket{" + selModel + "}" + rate + ")))", Legend: "p50"},
						{Expr: "histogram_quantile(0.9, sum by (le) (rate(lmcache:request_cache_hit_rate_bucket{" + selModel + "}" + rate + ")))", Legend: "p90"},
					}},
				{Title: "LMCache L1 (CPU) usage", Unit: "percentunit", Min: f(0), Max: f(1),
					Description: "Fraction of each worker's LMCache CPU buffer in use.",
					Queries:     []Query{{Expr: "max by (instance) (lmcache:local_cache_usage{" + selModel + "})", Legend: "{{instance}}"}}},
				{Title: "GPU KV-cache usage", Unit: "percentunit", Min: f(0), Max: f(1),
					Description: "Fraction of each worker's GPU KV blocks in use (vllm:kv_cache_usage_perc).",
					Queries:     []Query{{Expr: "max by (instance) (vllm:kv_cache_usage_perc{" + selModel + "})", Legend: "{{instance}}"}}},
			}},
			{Title: "L2 cache server", Panels: []Panel{
				{Title: "Hits and misses by tier", Unit: "ops",
					Description: "Lookups the cache server served, or missed, per tier.",
					Queries: []Query{
						{Expr: "sum by (tier) (rate(warmpath_cache_hits_total{" + sel + "}" + rate + "))", Legend: "{{tier}} hits"},
						{Expr: "sum by (tier) (rate(warmpath_cache_misses_total{" + sel + "}" + rate + "))", Legend: "{{tier}} misses"},
					}},
				{Title: "Stored bytes and capacity by tier", Unit: "bytes",
					Description: "Bytes resident per tier, overhead included, against the configured capacity.",
					Queries: []Query{
						{Expr: "sum by (tier) (warmpath_cache_stored_bytes{" + sel + "})", Legend: "{{tier}} stored"},
						{Expr: "sum by (tier) (warmpath_cache_capacity_bytes{" + sel + "})", Legend: "{{tier}} capacity"},
					}},
				{Title: "Evictions", Unit: "ops",
					Description: "Objects evicted for space, per tier.",
					Queries:     []Query{{Expr: "sum by (tier) (rate(warmpath_cache_evictions_total{" + sel + "}" + rate + "))", Legend: "{{tier}}"}}},
				{Title: "GET and PUT latency (p99)", Unit: "s",
					Description: "99th percentile time to serve a request, per protocol and operation.",
					Queries:     []Query{{Expr: "histogram_quantile(0.99, sum by (le, protocol, op) (rate(warmpath_cache_request_duration_seconds_bucket{" + sel + "}" + rate + ")))", Legend: "{{protocol}} {{op}}"}}},
				{Title: "Throughput", Unit: "Bps",
					Description: "Value bytes received (PUT/SET) and sent (GET), per protocol.",
					Queries: []Query{
						{Expr: "sum by (protocol) (rate(warmpath_cache_received_bytes_total{" + sel + "}" + rate + "))", Legend: "{{protocol}} in"},
						{Expr: "sum by (protocol) (rate(warmpath_cache_sent_bytes_total{" + sel + "}" + rate + "))", Legend: "{{protocol}} out"},
					}},
				{Title: "Forwarded requests (cluster mode)", Unit: "ops",
					Description: "Requests a node sent to the key's owning peer, by operation and result; errors are peers that failed, answered as misses.",
					Queries:     []Query{{Expr: "sum by (op, result) (rate(warmpath_cache_forwarded_requests_total{" + sel + "}" + rate + "))", Legend: "{{op}} {{result}}"}}},
				{Title: "Requests by result", Unit: "ops",
					Description: "Cache-server requests per protocol, operation and result.",
					Queries:     []Query{{Expr: "sum by (protocol, op, result) (rate(warmpath_cache_requests_total{" + sel + "}" + rate + "))", Legend: "{{protocol}} {{op}} {{result}}"}}},
			}},
		},
	}
}

func routing() Dashboard {
	return Dashboard{
		UID: "warmpath-routing", Title: "warmpath / Routing", File: "routing.json",
		Description: "How the router spreads requests: decisions per worker, balance, cache matches, the kvaware index and its event streams, and failures.",
		Rows: []Row{
			{Title: "Decisions", Panels: []Panel{
				{Title: "Requests per worker and strategy", Unit: "reqps",
					Description: "Where the router sends requests: one worker far above the others is hot-spotting.",
					Queries:     []Query{{Expr: "sum by (worker, strategy) (rate(warmpath_router_requests_total{" + sel + `, worker!=""}` + rate + "))", Legend: "{{strategy}} → {{worker}}"}}},
				{Title: "Load imbalance (max / mean in flight)", Unit: "none", Min: f(1),
					Description: "The busiest worker's in-flight requests over the mean: 1 is perfect balance.",
					Queries:     []Query{{Expr: "max(warmpath_router_inflight_requests{" + sel + "}) / clamp_min(avg(warmpath_router_inflight_requests{" + sel + "}), 0.001)", Legend: "max / mean"}}},
				{Title: "Prefix match ratio", Unit: "percentunit", Min: f(0), Max: f(1),
					Description: "Mean share of each prompt the strategy believed cached on the worker it chose.",
					Queries:     []Query{{Expr: "sum by (strategy) (rate(warmpath_router_prefix_match_ratio_sum{" + sel + "}" + rate + ")) / sum by (strategy) (rate(warmpath_router_prefix_match_ratio_count{" + sel + "}" + rate + "))", Legend: "{{strategy}}"}}},
				{Title: "Decision latency (p99)", Unit: "s",
					Description: "99th percentile time a strategy took to choose.",
					Queries:     []Query{{Expr: "histogram_quantile(0.99, sum by (le, strategy) (rate(warmpath_router_routing_decision_duration_seconds_bucket{" + sel + "}" + rate + ")))", Legend: "{{strategy}}"}}},
			}},
			{Title: "kvaware index and events", Panels: []Panel{
				{Title: "Index blocks per tier", Unit: "none",
					Description: "Blocks the kvaware index holds, per tier (gpu, cpu, l2), summed over workers.",
					Queries:     []Query{{Expr: "sum by (tier) (warmpath_router_kv_index_blocks{" + sel + "})", Legend: "{{tier}}"}}},
				{Title: "KV event rate", Unit: "ops",
					Description: "KV-cache events applied to the index, per worker.",
					Queries:     []Query{{Expr: "sum by (worker) (rate(warmpath_router_kv_events_total{" + sel + "}" + rate + "))", Legend: "{{worker}}"}}},
				{Title: "Sequence gaps, replays and lost batches", Unit: "ops",
					Description: "Gaps in workers' event streams, replays asked to repair them, and batches no replay could return (0 when all is well).",
					Queries: []Query{
						{Expr: "sum(rate(warmpath_router_kv_sequence_gaps_total{" + sel + "}" + rate + ")) or vector(0)", Legend: "gaps"},
						{Expr: "sum by (result) (rate(warmpath_router_kv_replays_total{" + sel + "}" + rate + "))", Legend: "replays {{result}}"},
						{Expr: `sum(rate(warmpath_router_kv_batches_total{` + sel + `, outcome="lost"}` + rate + ")) or vector(0)", Legend: "lost"},
					}},
				{Title: "Tokenization", Unit: "ops",
					Description: "Prompt tokenizations for kvaware: from the cache, by a worker, or failed (routed by prefixaware).",
					Queries:     []Query{{Expr: "sum by (result) (rate(warmpath_router_tokenize_total{" + sel + "}" + rate + ")) or vector(0)", Legend: "{{result}}"}}},
			}},
			{Title: "Failures", Panels: []Panel{
				{Title: "Retries", Unit: "ops",
					Description: "Requests moved to another worker before any byte reached the client, by reason (0 when none).",
					Queries:     []Query{{Expr: "sum by (reason) (rate(warmpath_router_retries_total{" + sel + "}" + rate + ")) or vector(0)", Legend: "{{reason}}"}}},
				{Title: "Ejections", Unit: "ops",
					Description: "Workers ejected after consecutive failures (0 when none).",
					Queries:     []Query{{Expr: "sum by (worker) (rate(warmpath_router_ejections_total{" + sel + "}" + rate + ")) or vector(0)", Legend: "{{worker}}"}}},
				{Title: "Rejections", Unit: "ops",
					Description: "Requests the router answered itself, by reason: over capacity, no worker, bad request…",
					Queries:     []Query{{Expr: "sum by (reason) (rate(warmpath_router_rejections_total{" + sel + "}" + rate + ")) or vector(0)", Legend: "{{reason}}"}}},
			}},
		},
	}
}
