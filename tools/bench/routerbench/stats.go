package routerbench

import (
	"math"
	"slices"
	"time"
)

// Summary describes a set of latencies in microseconds, rounded to 0.1 µs.
// Percentiles use the nearest-rank method on the exact, sorted samples (no
// histogram buckets), so p99 of 1000 samples is the 990th smallest.
type Summary struct {
	Count  int     `json:"count"`
	MeanUS float64 `json:"mean_us"`
	P50US  float64 `json:"p50_us"`
	P90US  float64 `json:"p90_us"`
	P99US  float64 `json:"p99_us"`
	P999US float64 `json:"p999_us"`
	MaxUS  float64 `json:"max_us"`
}

// Summarize sorts d in place and returns its summary; an empty d gives a
// zero Summary.
func Summarize(d []time.Duration) Summary {
	if len(d) == 0 {
		return Summary{}
	}
	slices.Sort(d)
	var sum time.Duration
	for _, v := range d {
		sum += v
	}
	return Summary{
		Count:  len(d),
		MeanUS: micros(sum / time.Duration(len(d))),
		P50US:  micros(Percentile(d, 50)),
		P90US:  micros(Percentile(d, 90)),
		P99US:  micros(Percentile(d, 99)),
		P999US: micros(Percentile(d, 99.9)),
		MaxUS:  micros(d[len(d)-1]),
	}
}

// Percentile returns the nearest-rank p-th percentile (0 < p ≤ 100) of
// sorted, which must be sorted ascending and non-empty.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = min(max(rank, 1), len(sorted))
	return sorted[rank-1]
}

func micros(d time.Duration) float64 {
	return round1(float64(d) / float64(time.Microsecond))
}

func round1(v float64) float64 { return math.Round(v*10) / 10 }
