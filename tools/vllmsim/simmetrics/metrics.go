// Package simmetrics exports the simulator's state under the metric names
// real workers use — vLLM's `vllm:*` and LMCache's `lmcache:*`, with their
// types, labels and histogram buckets — so dashboards, alerts and the
// router's load scraping work unchanged against simulated workers. The
// simulator's own health is exported as `warmpath_vllmsim_*`.
//
// Gauges and counters that mirror engine state are read at scrape time by
// a custom Collector; histograms are observed as steps complete. Latencies
// are in engine (modelled GPU) seconds.
package simmetrics

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmpath/warmpath/libs/timing"
	"github.com/warmpath/warmpath/tools/vllmsim/engine"
	"github.com/warmpath/warmpath/tools/vllmsim/lmcache"
)

// Engine is what the collector reads at scrape time; the runtime
// satisfies it.
type Engine interface {
	With(f func(e *engine.Engine, clock float64))
}

// PublisherStats reports KV-event publishing totals: batches given a
// sequence number, handed to the socket, and dropped.
type PublisherStats func() (sequenced, published, dropped uint64)

// Info is static worker information that labels the metrics.
type Info struct {
	ModelName            string
	WorkerID             string
	GPUMemoryUtilization float64
	Timing               timing.Model
}

// Bucket layouts copied from vLLM's metrics module so quantiles line up
// with real workers.
var (
	ttftBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
		2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
	itlBuckets = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0,
		2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}
	requestLatencyBuckets = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0,
		30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}
	hitRateBuckets  = []float64{0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0}
	retrieveBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
		1.0, 2.5, 5.0, 7.5, 10.0}
	// remoteMillisBuckets: LMCache reports remote get/put times in ms.
	remoteMillisBuckets = []float64{0.1, 0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000}
)

// tokenBuckets is vLLM's build_1_2_5_buckets(max_model_len).
func tokenBuckets(maxLen int) []float64 {
	var out []float64
	for exp := 1; ; exp *= 10 {
		for _, m := range []int{1, 2, 5} {
			v := m * exp
			if v > maxLen {
				return out
			}
			out = append(out, float64(v))
		}
	}
}

// Metrics holds the histogram and counter families observed per step.
type Metrics struct {
	info Info

	ttft, itl, e2e, queue, prefill, decode prometheus.Histogram
	promptTokens, generationTokens         prometheus.Histogram
	success                                *prometheus.CounterVec

	lmHitRate        prometheus.Histogram
	lmTimeToRetrieve prometheus.Histogram
	lmRetrieveReqs   prometheus.Counter
	lmRequested      prometheus.Counter
	lmHitTokens      prometheus.Counter
	lmVLLMHitTokens  prometheus.Counter

	remoteGetMillis, remotePutMillis prometheus.Histogram
}

// New registers every simulator metric on reg.
// l2 is nil without a remote tier; then l1 may be nil too.
func New(reg prometheus.Registerer, info Info, eng Engine, l1 *lmcache.L1, l2 *lmcache.Tiered, pub PublisherStats) *Metrics {
	var maxLen int
	var cfg engine.Config
	eng.With(func(e *engine.Engine, _ float64) { cfg = e.Config(); maxLen = cfg.MaxModelLen })

	vl := prometheus.Labels{"model_name": info.ModelName, "engine": "0"}
	ll := prometheus.Labels{"model_name": info.ModelName, "worker_id": info.WorkerID}
	hist := func(name, help string, buckets []float64, labels prometheus.Labels) prometheus.Histogram {
		h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets, ConstLabels: labels})
		reg.MustRegister(h)
		return h
	}
	counter := func(name, help string, labels prometheus.Labels) prometheus.Counter {
		c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels})
		reg.MustRegister(c)
		return c
	}
	m := &Metrics{info: info}
	m.ttft = hist("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", ttftBuckets, vl)
	m.itl = hist("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", itlBuckets, vl)
	m.e2e = hist("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", requestLatencyBuckets, vl)
	m.queue = hist("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", requestLatencyBuckets, vl)
	m.prefill = hist("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.", requestLatencyBuckets, vl)
	m.decode = hist("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.", requestLatencyBuckets, vl)
	m.promptTokens = hist("vllm:request_prompt_tokens", "Number of prefill tokens processed.", tokenBuckets(maxLen), vl)
	m.generationTokens = hist("vllm:request_generation_tokens", "Number of generation tokens processed.", tokenBuckets(maxLen), vl)
	m.success = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "vllm:request_success_total", Help: "Count of successfully processed requests.", ConstLabels: vl,
	}, []string{"finished_reason"})
	reg.MustRegister(m.success)

	m.lmHitRate = hist("lmcache:request_cache_hit_rate", "Hit rate of the LMCache retrieve for each request (0..1).", hitRateBuckets, ll)
	m.lmTimeToRetrieve = hist("lmcache:time_to_retrieve", "Time to retrieve KV from LMCache (seconds).", retrieveBuckets, ll)
	m.lmRetrieveReqs = counter("lmcache:num_retrieve_requests_total", "Total number of retrieve requests sent to LMCache.", ll)
	m.lmRequested = counter("lmcache:num_requested_tokens_total", "Total number of tokens requested from LMCache retrieves.", ll)
	m.lmHitTokens = counter("lmcache:num_hit_tokens_total", "Total number of tokens hit in LMCache retrieves.", ll)
	m.lmVLLMHitTokens = counter("lmcache:num_vllm_hit_tokens_total", "Number of tokens already hit in vLLM's prefix cache.", ll)

	if l2 != nil {
		m.remoteGetMillis = hist("lmcache:remote_time_to_get", "Time to get KV from the remote backend, per chunk (ms).", remoteMillisBuckets, ll)
		m.remotePutMillis = hist("lmcache:remote_time_to_put", "Time to put KV to the remote backend, per chunk (ms).", remoteMillisBuckets, ll)
	}
	reg.MustRegister(&collector{info: info, cfg: cfg, eng: eng, l1: l1, l2: l2, pub: pub, vl: vl, ll: ll, descs: newDescs(vl, ll, info, cfg)})
	return m
}

// ObserveGet implements lmcache.RemoteObserver.
func (m *Metrics) ObserveGet(d time.Duration, _ int) {
	m.remoteGetMillis.Observe(float64(d) / float64(time.Millisecond))
}

// ObservePut implements lmcache.RemoteObserver.
func (m *Metrics) ObservePut(d time.Duration, _ int) {
	m.remotePutMillis.Observe(float64(d) / float64(time.Millisecond))
}

// ObserveStep implements runtime.StepObserver.
func (m *Metrics) ObserveStep(res engine.StepResult) {
	for _, o := range res.Outputs {
		s := o.Request.Stats
		if o.First {
			m.ttft.Observe(s.FirstToken - o.Request.Arrival)
			m.queue.Observe(s.QueueSeconds)
			m.lmVLLMHitTokens.Add(float64(s.CachedTokens))
			if s.ExternalTokens > 0 {
				m.lmRetrieveReqs.Inc()
				m.lmRequested.Add(float64(s.ExternalTokens))
				m.lmHitTokens.Add(float64(s.ExternalTokens))
				remote := m.info.Timing.LoadSeconds(timing.TierRemote, s.ExternalRemote)
				if s.FetchSeconds > 0 { // measured network, modelled PCIe
					remote = m.info.Timing.LoadSeconds(timing.TierCPU, s.ExternalRemote) + s.FetchSeconds
				}
				m.lmTimeToRetrieve.Observe(m.info.Timing.LoadSeconds(timing.TierCPU, s.ExternalCPU) + remote)
			}
			if s.PromptTokens > 0 {
				m.lmHitRate.Observe(float64(s.CachedTokens+s.ExternalTokens) / float64(s.PromptTokens))
			}
		} else if o.HasToken {
			m.itl.Observe(o.SincePrev)
		}
		if o.Finished {
			m.e2e.Observe(s.Finished - o.Request.Arrival)
			m.prefill.Observe(s.PrefillSeconds)
			m.decode.Observe(s.DecodeSeconds)
			m.promptTokens.Observe(float64(s.PromptTokens))
			m.generationTokens.Observe(float64(s.OutputTokens))
			// Without EOS every request stops at max_tokens.
			m.success.WithLabelValues("length").Inc()
		}
	}
}

type descs struct {
	running, waiting, usage, cacheInfo                                       *prometheus.Desc
	prefixQueries, prefixHits, extQueries, extHits                           *prometheus.Desc
	promptTotal, generationTotal, preemptions                                *prometheus.Desc
	lmLookupReqs, lmLookupTokens, lmLookupHits, lmStoreReqs                  *prometheus.Desc
	lmStoredTokens, lmEvictions, lmLocalUsage                                *prometheus.Desc
	lmRemoteReadReqs, lmRemoteReadBytes                                      *prometheus.Desc
	lmRemoteWriteReqs, lmRemoteWriteBytes                                    *prometheus.Desc
	remoteErrors, remoteCorrupt, remoteDropped                               *prometheus.Desc
	steps, clock, eventsSequenced, eventsPublished, eventsDropped, gpuBlocks *prometheus.Desc
}

func newDescs(vl, ll prometheus.Labels, info Info, cfg engine.Config) descs {
	d := func(name, help string, labels prometheus.Labels) *prometheus.Desc {
		return prometheus.NewDesc(name, help, nil, labels)
	}
	sim := prometheus.Labels{"model_name": info.ModelName}
	cacheLabels := prometheus.Labels{
		"model_name":             info.ModelName,
		"engine":                 "0",
		"block_size":             strconv.Itoa(cfg.BlockSize),
		"num_gpu_blocks":         strconv.Itoa(cfg.NumGPUBlocks),
		"enable_prefix_caching":  strconv.FormatBool(cfg.EnablePrefixCaching),
		"gpu_memory_utilization": strconv.FormatFloat(info.GPUMemoryUtilization, 'g', -1, 64),
		"cache_dtype":            "auto",
	}
	return descs{
		running:            d("vllm:num_requests_running", "Number of requests in model execution batches.", vl),
		waiting:            d("vllm:num_requests_waiting", "Number of requests waiting to be processed.", vl),
		usage:              d("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", vl),
		cacheInfo:          prometheus.NewDesc("vllm:cache_config_info", "Information of the LLMEngine CacheConfig.", nil, cacheLabels),
		prefixQueries:      d("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens.", vl),
		prefixHits:         d("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.", vl),
		extQueries:         d("vllm:external_prefix_cache_queries_total", "External prefix cache queries from KV connector, in tokens.", vl),
		extHits:            d("vllm:external_prefix_cache_hits_total", "External prefix cache hits from KV connector, in tokens.", vl),
		promptTotal:        d("vllm:prompt_tokens_total", "Number of prefill tokens processed.", vl),
		generationTotal:    d("vllm:generation_tokens_total", "Number of generation tokens processed.", vl),
		preemptions:        d("vllm:num_preemptions_total", "Cumulative number of preemptions from the engine.", vl),
		lmLookupReqs:       d("lmcache:num_lookup_requests_total", "Total number of lookup requests to LMCache.", ll),
		lmLookupTokens:     d("lmcache:num_lookup_tokens_total", "Total number of tokens looked up in LMCache.", ll),
		lmLookupHits:       d("lmcache:num_lookup_hits_total", "Total number of tokens hit in LMCache lookups.", ll),
		lmStoreReqs:        d("lmcache:num_store_requests_total", "Total number of store requests sent to LMCache.", ll),
		lmStoredTokens:     d("lmcache:num_stored_tokens_total", "Total number of tokens stored in LMCache.", ll),
		lmEvictions:        d("lmcache:local_cpu_evict_count_total", "Total number of chunks evicted from the local CPU backend.", ll),
		lmLocalUsage:       d("lmcache:local_cache_usage", "Local cache usage (bytes) of LMCache.", ll),
		lmRemoteReadReqs:   d("lmcache:num_remote_read_requests_total", "Total number of chunks read from the remote backend.", ll),
		lmRemoteReadBytes:  d("lmcache:num_remote_read_bytes_total", "Total bytes read from the remote backend (scaled down by --lmcache-remote-scale).", ll),
		lmRemoteWriteReqs:  d("lmcache:num_remote_write_requests_total", "Total number of chunks written to the remote backend.", ll),
		lmRemoteWriteBytes: d("lmcache:num_remote_write_bytes_total", "Total bytes written to the remote backend (scaled down by --lmcache-remote-scale).", ll),
		remoteErrors:       d("warmpath_vllmsim_lmcache_remote_errors_total", "Remote backend calls that failed; each skips the remote for a backoff.", sim),
		remoteCorrupt:      d("warmpath_vllmsim_lmcache_remote_corrupt_total", "Remote values that were not the bytes stored, treated as misses.", sim),
		remoteDropped:      d("warmpath_vllmsim_lmcache_remote_dropped_puts_total", "Chunk stores dropped because the remote writer's queue was full.", sim),
		steps:              d("warmpath_vllmsim_engine_steps_total", "Engine steps executed by the simulator.", sim),
		clock:              d("warmpath_vllmsim_engine_clock_seconds", "Simulated engine time since start, in modelled GPU seconds.", sim),
		eventsSequenced:    d("warmpath_vllmsim_kv_event_batches_total", "KV-cache event batches given a sequence number (published, dropped or still queued).", sim),
		eventsPublished:    d("warmpath_vllmsim_kv_event_batches_published_total", "KV-cache event batches handed to the ZMQ publisher.", sim),
		eventsDropped:      d("warmpath_vllmsim_kv_event_batches_dropped_total", "KV-cache event batches dropped because the publisher queue was full.", sim),
		gpuBlocks:          d("warmpath_vllmsim_gpu_cached_blocks", "GPU KV blocks currently registered in the prefix cache.", sim),
	}
}

// collector reads engine state at scrape time.
type collector struct {
	info   Info
	cfg    engine.Config
	eng    Engine
	l1     *lmcache.L1
	l2     *lmcache.Tiered
	pub    PublisherStats
	vl, ll prometheus.Labels
	descs
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.all() {
		ch <- d
	}
}

func (c *collector) all() []*prometheus.Desc {
	d := c.descs
	out := []*prometheus.Desc{d.running, d.waiting, d.usage, d.cacheInfo, d.prefixQueries, d.prefixHits,
		d.promptTotal, d.generationTotal, d.preemptions, d.steps, d.clock, d.gpuBlocks}
	if c.l1 != nil {
		out = append(out, d.extQueries, d.extHits, d.lmLookupReqs, d.lmLookupTokens, d.lmLookupHits,
			d.lmStoreReqs, d.lmStoredTokens, d.lmEvictions, d.lmLocalUsage)
	}
	if c.l2 != nil {
		out = append(out, d.lmRemoteReadReqs, d.lmRemoteReadBytes, d.lmRemoteWriteReqs, d.lmRemoteWriteBytes,
			d.remoteErrors, d.remoteCorrupt, d.remoteDropped)
	}
	if c.pub != nil {
		out = append(out, d.eventsSequenced, d.eventsPublished, d.eventsDropped)
	}
	return out
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	var (
		running, waiting, cached int
		usage, clock             float64
		cnt                      engine.Counters
	)
	c.eng.With(func(e *engine.Engine, now float64) {
		running, waiting, usage, clock = e.NumRunning(), e.NumWaiting(), e.KVCacheUsage(), now
		cnt = e.Counters()
		cached = e.Pool().NumCached()
	})
	d := c.descs
	gauge := func(desc *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v)
	}
	counter := func(desc *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, v)
	}
	gauge(d.running, float64(running))
	gauge(d.waiting, float64(waiting))
	gauge(d.usage, usage)
	gauge(d.cacheInfo, 1)
	counter(d.prefixQueries, float64(cnt.PrefixQueries))
	counter(d.prefixHits, float64(cnt.PrefixHits))
	counter(d.promptTotal, float64(cnt.PromptTokens))
	counter(d.generationTotal, float64(cnt.GenerationTokens))
	counter(d.preemptions, float64(cnt.Preemptions))
	counter(d.steps, float64(cnt.Steps))
	gauge(d.clock, clock)
	gauge(d.gpuBlocks, float64(cached))
	if c.l1 != nil {
		l := c.l1.Counters()
		counter(d.extQueries, float64(cnt.ExternalQueries))
		counter(d.extHits, float64(cnt.ExternalHits))
		counter(d.lmLookupReqs, float64(l.LookupRequests))
		counter(d.lmLookupTokens, float64(l.LookupTokens))
		counter(d.lmLookupHits, float64(l.LookupHits))
		counter(d.lmStoreReqs, float64(l.StoreRequests))
		counter(d.lmStoredTokens, float64(l.StoredTokens))
		counter(d.lmEvictions, float64(l.Evictions))
		gauge(d.lmLocalUsage, float64(c.l1.UsageBytes()))
	}
	if c.l2 != nil {
		r := c.l2.RemoteCounters()
		counter(d.lmRemoteReadReqs, float64(r.ReadRequests))
		counter(d.lmRemoteReadBytes, float64(r.ReadBytes))
		counter(d.lmRemoteWriteReqs, float64(r.WriteRequests))
		counter(d.lmRemoteWriteBytes, float64(r.WriteBytes))
		counter(d.remoteErrors, float64(r.Errors))
		counter(d.remoteCorrupt, float64(r.Corrupt))
		counter(d.remoteDropped, float64(r.DroppedPuts))
	}
	if c.pub != nil {
		sequenced, published, dropped := c.pub()
		counter(d.eventsSequenced, float64(sequenced))
		counter(d.eventsPublished, float64(published))
		counter(d.eventsDropped, float64(dropped))
	}
}
