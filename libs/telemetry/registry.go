package telemetry

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// NewRegistry returns a Prometheus registry holding the Go runtime and
// process collectors (memory, GC, CPU, open files), which every warmpath
// process serves beside its own metrics. A fresh registry rather than
// prometheus.DefaultRegisterer keeps /metrics to what the process
// registers itself.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}
