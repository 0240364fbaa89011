package kvsub

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/warmpath/warmpath/services/router/kvindex"
)

var (
	eventsDesc = prometheus.NewDesc("warmpath_router_kv_events_total",
		"KV-cache events applied to the index, by worker.", []string{"worker"}, nil)
	gapsDesc = prometheus.NewDesc("warmpath_router_kv_sequence_gaps_total",
		"Sequence gaps seen in a worker's event stream.", []string{"worker"}, nil)
	replaysDesc = prometheus.NewDesc("warmpath_router_kv_replays_total",
		"Replay requests to a worker's replay socket, by result (ok, error).", []string{"worker", "result"}, nil)
	batchesDesc = prometheus.NewDesc("warmpath_router_kv_batches_total",
		"Event batches by outcome: applied live or from replay (received), replayed, lost (a gap replay could not fill).", []string{"worker", "outcome"}, nil)
	restartsDesc = prometheus.NewDesc("warmpath_router_kv_worker_restarts_total",
		"Worker restarts detected (its sequence went backwards); its index entries were dropped.", []string{"worker"}, nil)
	rejectedDesc = prometheus.NewDesc("warmpath_router_kv_events_rejected_total",
		"Events or messages not applied, by reason (decode_error, unknown_parent, invalid).", []string{"worker", "reason"}, nil)
	forgottenDesc = prometheus.NewDesc("warmpath_router_kv_worker_blocks_forgotten_total",
		"Blocks a worker's event state forgot, and took out of the index, to stay within --kv-index-max-worker-blocks (their removal was lost, or the worker caches more).", []string{"worker"}, nil)
	blocksDesc = prometheus.NewDesc("warmpath_router_kv_index_blocks",
		"Blocks the kvaware index holds per worker and tier (gpu, cpu, l2).", []string{"worker", "tier"}, nil)
	keysDesc = prometheus.NewDesc("warmpath_router_kv_index_keys",
		"Distinct block keys in the kvaware index.", nil, nil)
	capDesc = prometheus.NewDesc("warmpath_router_kv_index_capacity_keys",
		"The most block keys the index holds (--kv-index-max-keys).", nil, nil)
	evictedDesc = prometheus.NewDesc("warmpath_router_kv_index_evictions_total",
		"Block keys dropped from the index for space.", nil, nil)
	unknownTopicDesc = prometheus.NewDesc("warmpath_router_kv_unknown_topic_messages_total",
		"Messages on the router's own SUB socket (bind topology) whose topic names no known worker, or that are not event messages.", nil, nil)
	oversizeDesc = prometheus.NewDesc("warmpath_router_kv_events_oversize_frames_total",
		"KV-event and replay connections dropped because the peer announced a frame or message over --kv-events-max-frame-bytes or --kv-events-max-message-bytes, by limit (frame, message).", []string{"limit"}, nil)
	handshakeTimeoutsDesc = prometheus.NewDesc("warmpath_router_kv_events_handshake_timeouts_total",
		"KV-event and replay connections dropped because the peer did not finish its ZMTP handshake within --kv-events-handshake-timeout.", nil, nil)
	viewTokensDesc = prometheus.NewDesc("warmpath_router_kv_view_tokens",
		"Tokens the router's view of a worker's tier holds (cpu: LMCache L1), by the source of that knowledge (events, events+shadow, routing).", []string{"worker", "tier", "source"}, nil)
	viewCapDesc = prometheus.NewDesc("warmpath_router_kv_view_capacity_tokens",
		"The tier's capacity the view is kept within (--kv-cpu-capacity-tokens); absent when unknown.", []string{"worker", "tier"}, nil)
	viewEvictedDesc = prometheus.NewDesc("warmpath_router_kv_view_evicted_blocks_total",
		"Blocks the router's view of a tier evicted to stay within its capacity, as the tier itself reports no evictions.", []string{"worker", "tier"}, nil)
	viewLearnedDesc = prometheus.NewDesc("warmpath_router_kv_view_learned_blocks_total",
		"Blocks the router's view of a tier took from its own routing (a prompt's whole chunks once its prefill ended).", []string{"worker", "tier"}, nil)
	connectedDesc = prometheus.NewDesc("warmpath_router_kv_subscribed",
		"1 while the router is connected to the worker's event stream.", []string{"worker"}, nil)
)

// Collector exports the subscriber's and the index's state at scrape time.
type Collector struct {
	m   *Manager
	idx Store
}

// NewCollector returns the collector for m and idx.
func NewCollector(m *Manager, idx Store) *Collector { return &Collector{m: m, idx: idx} }

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{eventsDesc, gapsDesc, replaysDesc, batchesDesc, restartsDesc, rejectedDesc, forgottenDesc, viewTokensDesc, viewCapDesc, viewEvictedDesc, viewLearnedDesc, blocksDesc, keysDesc, capDesc, evictedDesc, connectedDesc, unknownTopicDesc, oversizeDesc, handshakeTimeoutsDesc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	health := c.m.Health()
	for w, k := range c.m.Counters() {
		counter(eventsDesc, k.Events.Load(), w)
		counter(gapsDesc, k.Gaps.Load(), w)
		counter(replaysDesc, k.Replays.Load()-k.ReplayErrors.Load(), w, "ok")
		counter(replaysDesc, k.ReplayErrors.Load(), w, "error")
		counter(batchesDesc, k.Batches.Load(), w, "received")
		counter(batchesDesc, k.Replayed.Load(), w, "replayed")
		counter(batchesDesc, k.Lost.Load(), w, "lost")
		counter(restartsDesc, k.Restarts.Load(), w)
		counter(rejectedDesc, k.DecodeErrors.Load(), w, "decode_error")
		counter(rejectedDesc, k.UnknownParent.Load(), w, "unknown_parent")
		counter(rejectedDesc, k.Invalid.Load(), w, "invalid")
		counter(forgottenDesc, k.Forgotten.Load(), w)
		v := 0.0
		if health[w].Connected {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(connectedDesc, prometheus.GaugeValue, v, w)
		for tier, tv := range health[w].Tiers {
			if tier == kvindex.GPU.String() {
				continue // vLLM's events are the truth there: kv_index_blocks says it
			}
			ch <- prometheus.MustNewConstMetric(viewTokensDesc, prometheus.GaugeValue, float64(tv.Tokens), w, tier, tv.Source)
			if tv.CapacityTokens > 0 {
				ch <- prometheus.MustNewConstMetric(viewCapDesc, prometheus.GaugeValue, float64(tv.CapacityTokens), w, tier)
			}
			counter(viewEvictedDesc, tv.Evicted, w, tier)
			counter(viewLearnedDesc, tv.Learned, w, tier)
		}
	}
	st := c.idx.Stats()
	for w, b := range st.Blocks {
		for t := kvindex.GPU; t <= kvindex.L2; t++ {
			ch <- prometheus.MustNewConstMetric(blocksDesc, prometheus.GaugeValue, float64(b[t]), w, t.String())
		}
	}
	ch <- prometheus.MustNewConstMetric(keysDesc, prometheus.GaugeValue, float64(st.Keys))
	ch <- prometheus.MustNewConstMetric(capDesc, prometheus.GaugeValue, float64(st.MaxKeys))
	counter(evictedDesc, st.Evicted)
	counter(unknownTopicDesc, c.m.UnknownTopics())
	g := c.m.GuardStats()
	counter(oversizeDesc, g.OversizeFrames, "frame")
	counter(oversizeDesc, g.OversizeMessages, "message")
	counter(handshakeTimeoutsDesc, g.HandshakeTimeouts)
}
