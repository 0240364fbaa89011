package capacity

import (
	"cmp"
	"math"
	"slices"
	"time"

	"github.com/warmpath/warmpath/tools/bench/des"
	"github.com/warmpath/warmpath/tools/bench/report"
	"github.com/warmpath/warmpath/tools/bench/workload"
)

// Probe is one run at one load factor and what it measured.
type Probe struct {
	// Factor is the time compression of the workload's arrivals (and
	// think times): 2 sends it twice as fast.
	Factor float64 `json:"factor"`
	// OfferedRPS is the served requests over the span of their arrivals,
	// as they arrived (a chat's next rounds wait for answers, so it can
	// fall short of the factor's promise when the fleet is slow): at the
	// highest passing factor, the goodput.
	OfferedRPS float64 `json:"offered_rps"`
	TTFTP90ms  float64 `json:"ttft_p90_ms"`
	// WithinSLORPS counts only the requests whose own TTFT met the SLO,
	// over the same span: it follows the offered load while the fleet
	// keeps up and falls away past its capacity, the shape the plots draw.
	WithinSLORPS float64 `json:"within_slo_rps"`
	Queue        Growth  `json:"queue"`
	// Rejected are prompts over the model length, refused as vLLM
	// refuses them; left out of every figure.
	Rejected int `json:"rejected"`
	// Output tokens over the arrival span, and the GPU time a thousand of
	// them took: workers x span / tokens. The span, not the makespan: a
	// fleet serving traffic for good is paid while the traffic arrives,
	// and a finite run's drain would otherwise count against short runs
	// (the queue criterion keeps the drain from hiding a backlog).
	OutputTokS      float64 `json:"output_tok_s"`
	GPUSecondsPer1K float64 `json:"gpu_seconds_per_1k_tokens"`
	// MakespanS is first arrival to last finish.
	MakespanS float64 `json:"makespan_s"`
	// Pass: TTFT p90 within the SLO and the queue did not grow.
	Pass bool `json:"pass"`
}

// Growth is the queue-growth criterion's measurement: the mean queueing
// delay (arrival to first scheduling on a worker) of the first and the
// last third of the requests in arrival order.
type Growth struct {
	FirstThirdMs float64 `json:"first_third_queue_ms"`
	LastThirdMs  float64 `json:"last_third_queue_ms"`
}

// Grows reports whether the queue grew: the last third's mean queueing
// delay exceeds the first third's by more than limit. A fleet below its
// capacity keeps the delay flat (it even falls as caches warm); above
// it, the queue and so the delay grow with every arrival.
func (g Growth) Grows(limit time.Duration) bool {
	return g.LastThirdMs-g.FirstThirdMs > float64(limit)/float64(time.Millisecond)
}

// QueueGrowth measures Growth over the records of served requests.
func QueueGrowth(recs []des.Record) Growth {
	served := make([]des.Record, 0, len(recs))
	for _, r := range recs {
		if r.Rejected == "" {
			served = append(served, r)
		}
	}
	slices.SortStableFunc(served, func(a, b des.Record) int { return cmp.Compare(a.Arrival, b.Arrival) })
	third := len(served) / 3
	if third == 0 {
		return Growth{}
	}
	mean := func(rs []des.Record) float64 {
		var sum float64
		for _, r := range rs {
			sum += r.Scheduled - r.Arrival
		}
		return round(1000 * sum / float64(len(rs)))
	}
	return Growth{FirstThirdMs: mean(served[:third]), LastThirdMs: mean(served[len(served)-third:])}
}

// SLO is a probe's pass criterion.
type SLO struct {
	// TTFTP90 is the bound on the served requests' TTFT p90.
	TTFTP90 time.Duration
	// QueueGrowth is the most the last third's mean queueing delay may
	// exceed the first third's.
	QueueGrowth time.Duration
}

// Measure turns one run's records on workers workers into a Probe
// judged against slo.
func Measure(recs []des.Record, workers int, slo SLO) Probe {
	var p Probe
	var ttfts []time.Duration
	first, lastArrival, lastFinish := math.Inf(1), math.Inf(-1), math.Inf(-1)
	var tokens int
	for _, r := range recs {
		if r.Rejected != "" {
			p.Rejected++
			continue
		}
		ttfts = append(ttfts, time.Duration((r.FirstToken-r.Arrival)*float64(time.Second)))
		first, lastArrival, lastFinish = min(first, r.Arrival), max(lastArrival, r.Arrival), max(lastFinish, r.Finished)
		tokens += r.Out
	}
	if len(ttfts) == 0 {
		return p
	}
	slices.Sort(ttfts)
	p.TTFTP90ms = round(float64(report.Percentile(ttfts, 90)) / float64(time.Millisecond))
	p.Queue = QueueGrowth(recs)
	p.MakespanS = round(lastFinish - first)
	if span := lastArrival - first; span > 0 {
		p.OfferedRPS = round(float64(len(ttfts)) / span)
		p.OutputTokS = round(float64(tokens) / span)
		within, _ := slices.BinarySearch(ttfts, slo.TTFTP90+1)
		p.WithinSLORPS = round(float64(within) / span)
		if tokens > 0 {
			p.GPUSecondsPer1K = round(float64(workers) * span / float64(tokens) * 1000)
		}
	}
	p.Pass = report.Percentile(ttfts, 90) <= slo.TTFTP90 && !p.Queue.Grows(slo.QueueGrowth)
	return p
}

// Compress returns reqs with arrivals and think times divided by factor:
// the same requests, offered factor times as fast (for a Mooncake trace,
// its replay speed-up). Prompts are shared with reqs, not copied.
func Compress(reqs []workload.Request, factor float64) []workload.Request {
	out := slices.Clone(reqs)
	for i := range out {
		out[i].Arrival = time.Duration(float64(out[i].Arrival) / factor)
		out[i].Think = time.Duration(float64(out[i].Think) / factor)
	}
	return out
}

// round keeps two decimals: the report's figures, not float noise.
func round(v float64) float64 { return math.Round(v*100) / 100 }
