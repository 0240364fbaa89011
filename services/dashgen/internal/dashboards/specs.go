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
	// AxisLabel names the y axis in words when the unit alone does not
	// say what is counted (blocks/s, $ per 1K tokens).
	AxisLabel string
}

// Row groups panels under a heading.
type Row struct {
	Title  string
	Panels []Panel
}

// Input is a value the viewer types in (a Grafana textbox variable),
// used in queries as $Name; Default is what it holds until changed.
type Input struct {
	Name, Label, Description, Default string
}

// Dashboard is one dashboard.
type Dashboard struct {
	UID, Title, Description string
	// File is the JSON file name under dashboards/.
	File string
	// Inputs follow the datasource and label variables.
	Inputs []Input
	Rows   []Row
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

// sumRate is the per-second rate of a counter summed by the labels in by
// (all series when by is empty), the shape most panels plot.
func sumRate(by, metric, selector string) string {
	agg := "sum"
	if by != "" {
		agg = "sum by (" + by + ") "
	}
	return agg + "(rate(" + metric + "{" + selector + "}" + rate + "))"
}

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

// Cost inputs. The default price is the one docs/benchmarks.md prices its
// capacity runs at (Lambda's on-demand 1x H100 SXM, lambda.ai/pricing), so
// the dashboard and the benchmark speak the same dollars.
const (
	gpuHourPrice  = "3.78"
	gpusPerWorker = "1"
)

func overview() Dashboard {
	return Dashboard{
		UID: "warmpath-overview", Title: "warmpath / Overview", File: "overview.json",
		Description: "Traffic, latency, throughput and cost of warmpath endpoints: what clients see through the router, next to what the workers report.",
		Inputs: []Input{
			{Name: "gpu_hour_price", Label: "$ per GPU-hour", Default: gpuHourPrice,
				Description: "What one GPU costs per hour. Default: Lambda's on-demand 1x H100 SXM price (lambda.ai/pricing), as docs/benchmarks.md uses."},
			{Name: "gpus_per_worker", Label: "GPUs per worker", Default: gpusPerWorker,
				Description: "GPUs each vLLM worker holds (its tensor-parallel size)."},
		},
		Rows: []Row{overviewNow(), overviewTraffic(), overviewLatency(), overviewWorkers(), overviewCost()},
	}
}

func overviewNow() Row {
	return Row{Title: "Now", Panels: []Panel{
		{Title: "TTFT p90", Kind: Stat, Unit: "s", Width: 6,
			Description: "Time to first token at the router, 90th percentile over the selected range's rate window.",
			Queries:     []Query{{Expr: "histogram_quantile(0.9, sum by (le) (rate(warmpath_router_ttft_seconds_bucket{" + sel + "}" + rate + ")))", Legend: "router TTFT p90"}}},
		{Title: "Prefix cache hit rate", Kind: Stat, Unit: "percentunit", Width: 6, Min: f(0), Max: f(1),
			Description: "Share of prompt tokens the workers' GPU prefix caches served (vllm:prefix_cache_hits / queries).",
			Queries:     []Query{{Expr: "sum(rate(vllm:prefix_cache_hits_total{" + selModel + "}" + rate + ")) / sum(rate(vllm:prefix_cache_queries_total{" + selModel + "}" + rate + "))", Legend: "GPU prefix cache"}}},
		{Title: "Output throughput", Kind: Stat, Unit: "tokens/s", Width: 6,
			Description: "Generated tokens per second across the selected workers.",
			Queries:     []Query{{Expr: sumRate("", "vllm:generation_tokens_total", selModel), Legend: "all workers"}}},
		{Title: "Healthy workers", Kind: Stat, Unit: "none", Width: 6,
			Description: "Workers passing the router's health checks and not ejected (a worker counts once however many router replicas watch it).",
			Queries:     []Query{{Expr: "sum(max by (worker) (warmpath_router_worker_healthy{" + sel + "}))", Legend: "healthy workers"}}},
	}}
}

func overviewTraffic() Row {
	all := "warmpath_router_requests_total{" + sel + "}"
	return Row{Title: "Traffic", Panels: []Panel{
		{Title: "Requests by status", Unit: "reqps", Width: 8,
			Description: "Requests the router answered, by HTTP status (499: the client left).",
			Queries:     []Query{{Expr: "sum by (code) (rate(" + all + rate + "))", Legend: "HTTP {{code}}"}}},
		{Title: "Errors by status", Unit: "reqps", Width: 8,
			Description: "Requests answered with anything but 2xx, by status: 4xx are the clients' (404: unknown model, 429: over capacity), 5xx the fleet's.",
			Queries:     []Query{{Expr: "sum by (code) (rate(warmpath_router_requests_total{" + sel + `, code!~"2.."}` + rate + "))", Legend: "HTTP {{code}}"}}},
		{Title: "Error rate", Unit: "percentunit", Min: f(0), Width: 8,
			Description: "Share of requests answered with a 5xx status.",
			Queries:     []Query{{Expr: "(sum(rate(warmpath_router_requests_total{" + sel + `, code=~"5.."}` + rate + ")) or vector(0)) / sum(rate(" + all + rate + "))", Legend: "5xx share"}}},
	}}
}

func overviewLatency() Row {
	ttft := append(quantiles("warmpath_router_ttft_seconds", sel, "router"), quantiles("vllm:time_to_first_token_seconds", selModel, "workers")...)
	e2e := append(quantiles("warmpath_router_request_duration_seconds", sel, "router"), quantiles("vllm:e2e_request_latency_seconds", selModel, "workers")...)
	return Row{Title: "Latency", Panels: []Panel{
		{Title: "Time to first token", Unit: "s",
			Description: "TTFT measured by the router (arrival to first response byte) and reported by the workers (vllm:time_to_first_token_seconds), side by side: the gap is queueing and routing.",
			Queries:     ttft},
		{Title: "End-to-end latency", Unit: "s",
			Description: "Whole-request latency at the router and at the workers.",
			Queries:     e2e},
	}}
}

func overviewWorkers() Row {
	return Row{Title: "Workers", Panels: []Panel{
		{Title: "Output tokens per second", Unit: "tokens/s", Width: 8,
			Description: "Generated tokens per second, per worker.",
			Queries:     []Query{{Expr: sumRate("instance", "vllm:generation_tokens_total", selModel), Legend: "{{instance}}"}}},
		{Title: "Queue depth: running and waiting requests", Unit: "none", AxisLabel: "requests", Width: 8,
			Description: "Requests each worker is running and holding in its queue (vllm:num_requests_running, _waiting), and requests the router holds waiting for a concurrency slot: a growing waiting line is a fleet short of GPUs.",
			Queries: []Query{
				{Expr: "sum by (instance) (vllm:num_requests_running{" + selModel + "})", Legend: "{{instance}} running"},
				{Expr: "sum by (instance) (vllm:num_requests_waiting{" + selModel + "})", Legend: "{{instance}} waiting"},
				{Expr: "sum(warmpath_router_queued_requests{" + sel + "})", Legend: "router queue"},
			}},
		{Title: "GPU KV-cache usage per worker", Unit: "percentunit", Min: f(0), Max: f(1), Width: 8,
			Description: "Fraction of each worker's GPU KV blocks in use (vllm:kv_cache_usage_perc): near 100% the worker preempts and evicts cached prefixes.",
			Queries:     []Query{{Expr: "max by (instance) (vllm:kv_cache_usage_perc{" + selModel + "})", Legend: "{{instance}}"}}},
	}}
}

// overviewCost prices the fleet: GPUs (workers × $gpus_per_worker) times
// $gpu_hour_price is dollars per hour; over tokens per second it is dollars
// per 1K tokens at the traffic actually served.
func overviewCost() Row {
	perHour := "$gpu_hour_price * count(vllm:num_requests_running{" + selModel + "}) * $gpus_per_worker"
	output := sumRate("", "vllm:generation_tokens_total", selModel)
	prompt := sumRate("", "vllm:prompt_tokens_total", selModel)
	per1K := func(tokens string) string { return "(" + perHour + ") / 3600 / ((" + tokens + ") / 1000)" }
	return Row{Title: "Cost", Panels: []Panel{
		{Title: "Fleet cost per hour", Kind: Stat, Unit: "currencyUSD", Width: 6,
			Description: "GPUs serving (workers × GPUs per worker) times the $ per GPU-hour input.",
			Queries:     []Query{{Expr: perHour, Legend: "$ per hour"}}},
		{Title: "Cost per 1K tokens", Unit: "currencyUSD", AxisLabel: "$ per 1K tokens", Width: 18,
			Description: "GPU-hours paid divided by the tokens served, priced at the $ per GPU-hour input: per 1K generated tokens (the benchmarks' figure) and per 1K prompt plus generated tokens. An idle fleet costs the same per hour, so the figure rises as traffic falls.",
			Queries: []Query{
				{Expr: per1K(output), Legend: "per 1K output tokens"},
				{Expr: per1K(prompt + " + " + output), Legend: "per 1K prompt + output tokens"},
			}},
	}}
}

func kvCache() Dashboard {
	return Dashboard{
		UID: "warmpath-kv-cache", Title: "warmpath / KV cache", File: "kv-cache.json",
		Description: "The tiered KV cache: GPU prefix caches, LMCache's CPU tier (L1) and the warmpath cache server (L2).",
		Rows:        []Row{kvTiers(), kvWorkers(), kvCacheServer()},
	}
}

// kvTiers compares the tiers side by side. LMCache counts L1 and L2 hits
// together, so the L2's own share comes from the cache server.
func kvTiers() Row {
	hits := sumRate("tier", "warmpath_cache_hits_total", sel)
	misses := sumRate("tier", "warmpath_cache_misses_total", sel)
	return Row{Title: "Tiers", Panels: []Panel{
		{Title: "Hit rate by tier", Unit: "percentunit", Min: f(0), Max: f(1), Width: 8,
			Description: "GPU: share of prompt tokens vLLM's prefix cache held. L1+L2: share of the tokens missing from the GPU that LMCache supplied (vllm:external_prefix_cache_hits / queries). L2: share of cache-server lookups found, per cache-server tier.",
			Queries: []Query{
				{Expr: "sum(rate(vllm:prefix_cache_hits_total{" + selModel + "}" + rate + ")) / sum(rate(vllm:prefix_cache_queries_total{" + selModel + "}" + rate + "))", Legend: "GPU (vLLM prefix cache)"},
				{Expr: "sum(rate(vllm:external_prefix_cache_hits_total{" + selModel + "}" + rate + ")) / sum(rate(vllm:external_prefix_cache_queries_total{" + selModel + "}" + rate + "))", Legend: "L1+L2 (LMCache, beyond GPU)"},
				{Expr: hits + " / (" + hits + " + " + misses + ")", Legend: "L2 {{tier}} (cache server)"},
			}},
		{Title: "Tokens loaded and stored per tier", Unit: "tokens/s", Width: 8,
			Description: "Prompt tokens the GPU prefix cache served, tokens LMCache loaded into the GPU from L1 or L2 (lmcache:num_hit_tokens), and tokens stored from the GPU into L1 (lmcache:num_stored_tokens).",
			Queries: []Query{
				{Expr: sumRate("", "vllm:prefix_cache_hits_total", selModel), Legend: "GPU hits"},
				{Expr: sumRate("", "lmcache:num_hit_tokens_total", selModel), Legend: "L1/L2 → GPU"},
				{Expr: sumRate("", "lmcache:num_stored_tokens_total", selModel), Legend: "GPU → L1"},
			}},
		{Title: "Bytes moved to and from L2", Unit: "Bps", Width: 8,
			Description: "KV bytes each worker's LMCache read from the L2 into L1 and wrote from L1 to the L2 (lmcache:num_remote_read_bytes, _write_bytes).",
			Queries: []Query{
				{Expr: sumRate("instance", "lmcache:num_remote_read_bytes_total", selModel), Legend: "{{instance}} L2 → L1"},
				{Expr: sumRate("instance", "lmcache:num_remote_write_bytes_total", selModel), Legend: "{{instance}} L1 → L2"},
			}},
	}}
}

func kvWorkers() Row {
	return Row{Title: "GPU and LMCache (workers)", Panels: []Panel{
		{Title: "GPU prefix cache hit rate", Unit: "percentunit", Min: f(0), Max: f(1),
			Description: "Share of prompt tokens served from each worker's GPU prefix cache.",
			Queries:     []Query{{Expr: "sum by (instance) (rate(vllm:prefix_cache_hits_total{" + selModel + "}" + rate + ")) / sum by (instance) (rate(vllm:prefix_cache_queries_total{" + selModel + "}" + rate + "))", Legend: "{{instance}}"}}},
		{Title: "LMCache lookup hit rate", Unit: "percentunit", Min: f(0), Max: f(1),
			Description: "Share of looked-up tokens LMCache found (lmcache:num_lookup_hits / num_lookup_tokens).",
			Queries:     []Query{{Expr: "sum by (instance) (rate(lmcache:num_lookup_hits_total{" + selModel + "}" + rate + ")) / sum by (instance) (rate(lmcache:num_lookup_tokens_total{" + selModel + "}" + rate + "))", Legend: "{{instance}}"}}},
		{Title: "Tokens served from LMCache", Unit: "tokens/s",
			Description: "Prompt tokens each worker loaded from LMCache (L1 or L2) instead of computing them (lmcache:num_hit_tokens).",
			Queries:     []Query{{Expr: sumRate("instance", "lmcache:num_hit_tokens_total", selModel), Legend: "{{instance}}"}}},
		{Title: "Per-request LMCache hit rate", Unit: "percentunit", Min: f(0), Max: f(1),
			Description: "Quantiles of the share of each request's tokens LMCache held (lmcache:request_cache_hit_rate).",
			Queries: []Query{
				{Expr: "histogram_quantile(0.5, sum by (le) (rate(lmcache:request_cache_hit_rate_bucket{" + selModel + "}" + rate + ")))", Legend: "p50"},
				{Expr: "histogram_quantile(0.9, sum by (le) (rate(lmcache:request_cache_hit_rate_bucket{" + selModel + "}" + rate + ")))", Legend: "p90"},
			}},
		{Title: "LMCache L1 (CPU) bytes in use", Unit: "bytes",
			Description: "Bytes each worker's LMCache CPU buffer holds (lmcache:local_cache_usage).",
			Queries:     []Query{{Expr: "max by (instance) (lmcache:local_cache_usage{" + selModel + "})", Legend: "{{instance}}"}}},
		{Title: "GPU KV-cache usage", Unit: "percentunit", Min: f(0), Max: f(1),
			Description: "Fraction of each worker's GPU KV blocks in use (vllm:kv_cache_usage_perc).",
			Queries:     []Query{{Expr: "max by (instance) (vllm:kv_cache_usage_perc{" + selModel + "})", Legend: "{{instance}}"}}},
	}}
}

func kvCacheServer() Row {
	return Row{Title: "L2 cache server", Panels: []Panel{
		{Title: "Hits and misses by tier", Unit: "ops",
			Description: "Lookups the cache server served, or missed, per tier.",
			Queries: []Query{
				{Expr: sumRate("tier", "warmpath_cache_hits_total", sel), Legend: "{{tier}} hits"},
				{Expr: sumRate("tier", "warmpath_cache_misses_total", sel), Legend: "{{tier}} misses"},
			}},
		{Title: "Stored bytes and capacity by tier", Unit: "bytes",
			Description: "Bytes resident per tier, overhead included, against the configured capacity.",
			Queries: []Query{
				{Expr: "sum by (tier) (warmpath_cache_stored_bytes{" + sel + "})", Legend: "{{tier}} stored"},
				{Expr: "sum by (tier) (warmpath_cache_capacity_bytes{" + sel + "})", Legend: "{{tier}} capacity"},
			}},
		{Title: "Evictions", Unit: "ops",
			Description: "Objects evicted for space, per tier.",
			Queries:     []Query{{Expr: sumRate("tier", "warmpath_cache_evictions_total", sel), Legend: "{{tier}}"}}},
		{Title: "GET and PUT latency (p99)", Unit: "s",
			Description: "99th percentile time to serve a request, per protocol and operation.",
			Queries:     []Query{{Expr: "histogram_quantile(0.99, sum by (le, protocol, op) (rate(warmpath_cache_request_duration_seconds_bucket{" + sel + "}" + rate + ")))", Legend: "{{protocol}} {{op}}"}}},
		{Title: "Throughput", Unit: "Bps",
			Description: "Value bytes received (PUT/SET) and sent (GET), per protocol.",
			Queries: []Query{
				{Expr: sumRate("protocol", "warmpath_cache_received_bytes_total", sel), Legend: "{{protocol}} in"},
				{Expr: sumRate("protocol", "warmpath_cache_sent_bytes_total", sel), Legend: "{{protocol}} out"},
			}},
		{Title: "Forwarded requests (cluster mode)", Unit: "ops",
			Description: "Requests a node sent to the key's owning peer, by operation and result; errors are peers that failed, answered as misses.",
			Queries:     []Query{{Expr: sumRate("op, result", "warmpath_cache_forwarded_requests_total", sel), Legend: "{{op}} {{result}}"}}},
		{Title: "Requests by result", Unit: "ops",
			Description: "Cache-server requests per protocol, operation and result.",
			Queries:     []Query{{Expr: sumRate("protocol, op, result", "warmpath_cache_requests_total", sel), Legend: "{{protocol}} {{op}} {{result}}"}}},
	}}
}

func routing() Dashboard {
	return Dashboard{
		UID: "warmpath-routing", Title: "warmpath / Routing", File: "routing.json",
		Description: "How the router spreads requests: decisions per worker, strategy and reason, balance, cache matches, the kvaware index and its event streams, and failures.",
		Rows:        []Row{routingDecisions(), routingIndex(), routingFailures()},
	}
}

// imbalance is the busiest worker over the mean one. perWorker must be
// summed by worker over routers, so replicas of the router are not taken
// for workers.
func imbalance(perWorker string) string {
	return "max(" + perWorker + ") / clamp_min(avg(" + perWorker + "), 0.001)"
}

func routingDecisions() Row {
	routed := "warmpath_router_requests_total{" + sel + `, worker!=""}`
	return Row{Title: "Decisions", Panels: []Panel{
		{Title: "Requests per worker and strategy", Unit: "reqps",
			Description: "Where the router sends requests: one worker far above the others is hot-spotting.",
			Queries:     []Query{{Expr: "sum by (worker, strategy) (rate(" + routed + rate + "))", Legend: "{{strategy}} → {{worker}}"}}},
		{Title: "Decisions by strategy and reason", Unit: "reqps",
			Description: "Requests each strategy routed, and the cache-aware decisions that had nothing to route on, by reason (no_prefix_cached: no worker held any of the prompt; no_tokens: kvaware routed by prefixaware). A strategy that mostly falls back routes by load alone.",
			Queries: []Query{
				{Expr: "sum by (strategy) (rate(" + routed + rate + "))", Legend: "{{strategy}}: routed"},
				{Expr: sumRate("strategy, reason", "warmpath_router_routing_fallbacks_total", sel), Legend: "{{strategy}}: fallback, {{reason}}"},
			}},
		{Title: "Cache credited to decisions, by tier", Unit: "short", AxisLabel: "blocks/s",
			Description: "Prompt blocks kvaware believed cached on the worker it chose, by the tier it credited (gpu, cpu: LMCache L1, l2: the shared cache): why it chose that worker.",
			Queries:     []Query{{Expr: sumRate("strategy, tier", "warmpath_router_credited_blocks_total", sel), Legend: "{{strategy}}: {{tier}}"}}},
		{Title: "Load imbalance (max / mean per worker)", Unit: "none", AxisLabel: "max / mean (1 = balanced)", Min: f(0),
			Description: "The busiest worker over the mean worker, by request rate and by requests in flight: 1 is perfect balance, 2 means one worker carries twice its share. In flight reads 0 when the fleet is idle.",
			Queries: []Query{
				{Expr: imbalance("sum by (worker) (rate(" + routed + rate + "))"), Legend: "request rate"},
				{Expr: imbalance("sum by (worker) (warmpath_router_inflight_requests{" + sel + "})"), Legend: "in flight"},
			}},
		{Title: "Prefix match ratio", Unit: "percentunit", Min: f(0), Max: f(1),
			Description: "Mean share of each prompt the strategy believed cached on the worker it chose.",
			Queries:     []Query{{Expr: "sum by (strategy) (rate(warmpath_router_prefix_match_ratio_sum{" + sel + "}" + rate + ")) / sum by (strategy) (rate(warmpath_router_prefix_match_ratio_count{" + sel + "}" + rate + "))", Legend: "{{strategy}}"}}},
		{Title: "Decision latency (p99)", Unit: "s",
			Description: "99th percentile time a strategy took to choose.",
			Queries:     []Query{{Expr: "histogram_quantile(0.99, sum by (le, strategy) (rate(warmpath_router_routing_decision_duration_seconds_bucket{" + sel + "}" + rate + ")))", Legend: "{{strategy}}"}}},
	}}
}

func routingIndex() Row {
	return Row{Title: "kvaware index and events", Panels: []Panel{
		{Title: "Index blocks per tier", Unit: "none", AxisLabel: "blocks",
			Description: "Blocks the kvaware index holds, per tier (gpu, cpu, l2), summed over workers.",
			Queries:     []Query{{Expr: "sum by (tier) (warmpath_router_kv_index_blocks{" + sel + "})", Legend: "{{tier}}"}}},
		{Title: "KV event rate", Unit: "ops",
			Description: "KV-cache events applied to the index, per worker.",
			Queries:     []Query{{Expr: sumRate("worker", "warmpath_router_kv_events_total", sel), Legend: "{{worker}}"}}},
		{Title: "Sequence gaps, replays and lost batches", Unit: "ops",
			Description: "Gaps in workers' event streams, replays asked to repair them, and batches no replay could return (0 when all is well).",
			Queries: []Query{
				{Expr: "sum(rate(warmpath_router_kv_sequence_gaps_total{" + sel + "}" + rate + ")) or vector(0)", Legend: "gaps"},
				{Expr: sumRate("result", "warmpath_router_kv_replays_total", sel), Legend: "replays {{result}}"},
				{Expr: `sum(rate(warmpath_router_kv_batches_total{` + sel + `, outcome="lost"}` + rate + ")) or vector(0)", Legend: "lost"},
			}},
		{Title: "Tokenization", Unit: "ops",
			Description: "Prompt tokenizations for kvaware: from the cache, by a worker, or failed (routed by prefixaware).",
			Queries:     []Query{{Expr: "sum by (result) (rate(warmpath_router_tokenize_total{" + sel + "}" + rate + ")) or on() vector(0)", Legend: "{{result}}"}}},
	}}
}

func routingFailures() Row {
	return Row{Title: "Failures", Panels: []Panel{
		{Title: "Retries", Unit: "ops", Width: 8,
			Description: "Requests moved to another worker before any byte reached the client, by reason (0 when none).",
			Queries:     []Query{{Expr: "sum by (reason) (rate(warmpath_router_retries_total{" + sel + "}" + rate + ")) or on() vector(0)", Legend: "{{reason}}"}}},
		{Title: "Ejections", Unit: "ops", Width: 8,
			Description: "Workers ejected after consecutive failures (0 when none).",
			Queries:     []Query{{Expr: "sum by (worker) (rate(warmpath_router_ejections_total{" + sel + "}" + rate + ")) or on() vector(0)", Legend: "{{worker}}"}}},
		{Title: "Rejections", Unit: "ops", Width: 8,
			Description: "Requests the router answered itself, by reason: over capacity, no worker, bad request…",
			Queries:     []Query{{Expr: "sum by (reason) (rate(warmpath_router_rejections_total{" + sel + "}" + rate + ")) or on() vector(0)", Legend: "{{reason}}"}}},
	}}
}
