package l2view

import "github.com/prometheus/client_golang/prometheus"

var (
	chunksDesc = prometheus.NewDesc("warmpath_router_l2_chunks",
		"Chunks the router knows a cache server (shared L2) holds, from its KV events.", []string{"endpoint"}, nil)
	eventsDesc = prometheus.NewDesc("warmpath_router_l2_events_total",
		"Cache-server KV events applied to the router's L2 view.", []string{"endpoint"}, nil)
	resyncsDesc = prometheus.NewDesc("warmpath_router_l2_resyncs_total",
		"Rebuilds of a cache server's part of the L2 view from its snapshot, by reason (connect, gap, restart, cleared, new_model).", []string{"endpoint", "reason"}, nil)
	connectedDesc = prometheus.NewDesc("warmpath_router_l2_connected",
		"1 while the router is connected to the cache server's event stream.", []string{"endpoint"}, nil)
	decodeErrorsDesc = prometheus.NewDesc("warmpath_router_l2_decode_errors_total",
		"Cache-server event messages the router could not read (bad frames, topic or batch).", []string{"endpoint"}, nil)
	refusedDesc = prometheus.NewDesc("warmpath_router_l2_refused_chunks_total",
		"Chunks left out of the L2 view because it held --l2-max-chunks.", nil, nil)
)

// reasons are exported at 0 from the start, so rate() sees the first one.
var reasons = []string{ReasonConnect, ReasonGap, ReasonRestart, ReasonCleared, ReasonNewModel}

// Collector exports the view's state at scrape time.
type Collector struct{ v *View }

// NewCollector returns the collector for v.
func NewCollector(v *View) *Collector { return &Collector{v: v} }

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{chunksDesc, eventsDesc, resyncsDesc, connectedDesc, decodeErrorsDesc, refusedDesc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	for _, h := range c.v.Health() {
		ch <- prometheus.MustNewConstMetric(chunksDesc, prometheus.GaugeValue, float64(h.Chunks), h.Events)
		ch <- prometheus.MustNewConstMetric(eventsDesc, prometheus.CounterValue, float64(h.EventsTotal), h.Events)
		ch <- prometheus.MustNewConstMetric(decodeErrorsDesc, prometheus.CounterValue, float64(h.DecodeErrors), h.Events)
		for _, r := range reasons {
			ch <- prometheus.MustNewConstMetric(resyncsDesc, prometheus.CounterValue, float64(h.Resyncs[r]), h.Events, r)
		}
		v := 0.0
		if h.Connected {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(connectedDesc, prometheus.GaugeValue, v, h.Events)
	}
	ch <- prometheus.MustNewConstMetric(refusedDesc, prometheus.CounterValue, float64(c.v.Stats().Refused))
}
