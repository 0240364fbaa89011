// Package report turns benchmark runs (live or simulated) into what users
// choose a strategy on: a table per configuration of TTFT percentiles,
// throughput, prefix hit rate (and its fraction of the oracle's), load
// imbalance and changes against a baseline, as text, markdown, JSON and
// PNG plots.
package report

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Sample is one request as measured.
type Sample struct {
	TTFT, E2E, MeanITL time.Duration
	PromptTokens       int64
	CachedTokens       int64
	OutputTokens       int64
	Failed             bool
}

// Run is one configuration's measurements.
type Run struct {
	// Name labels the row, e.g. "kvaware / L1+L2".
	Name     string
	Workload string
	Samples  []Sample
	// Makespan is the time from the first arrival to the last finish.
	Makespan time.Duration
	// HitRate is the fraction of prompt tokens served from cache (GPU
	// prefix cache or LMCache); NaN computes it from the samples.
	HitRate float64
	// MetricsHitRate is the workers' own view, from their /metrics
	// (vllm:prefix_cache_hits + external hits over queries); it counts a
	// preempted request's readmission again, so it reads higher than
	// HitRate under memory pressure. NaN when not measured.
	MetricsHitRate float64
	// OracleHitRate is the hit rate one worker holding the whole fleet's
	// cache would reach; 0 when unknown.
	OracleHitRate float64
	// OracleTTFTP90 is that worker's TTFT p90 with each request served
	// alone: the lowest p90 routing could reach; 0 when unknown.
	OracleTTFTP90 time.Duration
	// PerWorker is how many requests each worker served.
	PerWorker map[string]float64
}

// Summary is a Run's figures.
type Summary struct {
	Name           string  `json:"name"`
	Workload       string  `json:"workload"`
	Requests       int     `json:"requests"`
	Errors         int     `json:"errors"`
	TTFTP50ms      float64 `json:"ttft_p50_ms"`
	TTFTP90ms      float64 `json:"ttft_p90_ms"`
	TTFTP99ms      float64 `json:"ttft_p99_ms"`
	ITLms          float64 `json:"itl_mean_ms"`
	E2EP50ms       float64 `json:"e2e_p50_ms"`
	ThroughputTokS float64 `json:"throughput_tok_s"`
	HitRate        float64 `json:"hit_rate"`
	MetricsHitRate float64 `json:"metrics_hit_rate,omitempty"`
	OracleHitRate  float64 `json:"oracle_hit_rate,omitempty"`
	OfOracle       float64 `json:"hit_rate_of_oracle,omitempty"`
	// OracleTTFTP90ms is Run.OracleTTFTP90.
	OracleTTFTP90ms float64 `json:"oracle_ttft_p90_ms,omitempty"`
	Imbalance       float64 `json:"imbalance"`
	// Changes against the baseline run of the same workload, in percent.
	TTFTP50ChangePct    float64 `json:"ttft_p50_change_pct"`
	TTFTP90ChangePct    float64 `json:"ttft_p90_change_pct"`
	ThroughputChangePct float64 `json:"throughput_change_pct"`
	ttfts               []time.Duration
}

// Summarize computes a Run's Summary (without changes; see Compare).
func Summarize(r Run) Summary {
	s := Summary{Name: r.Name, Workload: r.Workload, Requests: len(r.Samples), OracleHitRate: r.OracleHitRate}
	var itl time.Duration
	var itlN int
	var e2e []time.Duration
	var prompt, cached, out int64
	for _, x := range r.Samples {
		if x.Failed {
			s.Errors++
			continue
		}
		s.ttfts = append(s.ttfts, x.TTFT)
		e2e = append(e2e, x.E2E)
		if x.MeanITL > 0 {
			itl += x.MeanITL
			itlN++
		}
		prompt += x.PromptTokens
		cached += x.CachedTokens
		out += x.OutputTokens
	}
	slices.Sort(s.ttfts)
	slices.Sort(e2e)
	s.TTFTP50ms = ms(Percentile(s.ttfts, 50))
	s.TTFTP90ms = ms(Percentile(s.ttfts, 90))
	s.TTFTP99ms = ms(Percentile(s.ttfts, 99))
	s.E2EP50ms = ms(Percentile(e2e, 50))
	if itlN > 0 {
		s.ITLms = ms(itl / time.Duration(itlN))
	}
	if r.Makespan > 0 {
		s.ThroughputTokS = round(float64(out) / r.Makespan.Seconds())
	}
	s.HitRate = r.HitRate
	if math.IsNaN(s.HitRate) && prompt > 0 {
		s.HitRate = float64(cached) / float64(prompt)
	}
	s.HitRate = round3(s.HitRate)
	if !math.IsNaN(r.MetricsHitRate) {
		s.MetricsHitRate = round3(r.MetricsHitRate)
	}
	if r.OracleHitRate > 0 {
		s.OfOracle = round3(s.HitRate / r.OracleHitRate)
	}
	s.OracleTTFTP90ms = ms(r.OracleTTFTP90)
	s.Imbalance = round3(Imbalance(r.PerWorker))
	return s
}

// Imbalance is max/mean of the per-worker counts (1 is perfectly even).
func Imbalance(per map[string]float64) float64 {
	if len(per) == 0 {
		return 0
	}
	var sum, hi float64
	for _, v := range per {
		sum += v
		hi = max(hi, v)
	}
	if sum == 0 {
		return 0
	}
	return hi / (sum / float64(len(per)))
}

// Compare fills each summary's changes against the one named baseline of
// the same workload.
func Compare(sums []Summary, baseline string) {
	base := map[string]Summary{}
	for _, s := range sums {
		if s.Name == baseline {
			base[s.Workload] = s
		}
	}
	for i := range sums {
		b, ok := base[sums[i].Workload]
		if !ok {
			continue
		}
		sums[i].TTFTP50ChangePct = ChangePct(sums[i].TTFTP50ms, b.TTFTP50ms)
		sums[i].TTFTP90ChangePct = ChangePct(sums[i].TTFTP90ms, b.TTFTP90ms)
		sums[i].ThroughputChangePct = ChangePct(sums[i].ThroughputTokS, b.ThroughputTokS)
	}
}

// Percentile of sorted durations (nearest rank); 0 for none.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// Table writes the summaries as an aligned text table.
func Table(w io.Writer, sums []Summary) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "workload\tconfig\treqs\terr\tTTFT p50\tp90\tp99\tthroughput\thit rate\tof oracle\timbalance\tΔTTFT p50\tΔTTFT p90\tΔthroughput\t")
	for _, s := range sums {
		oracle := "-"
		if s.OfOracle > 0 {
			oracle = fmt.Sprintf("%.0f%%", 100*s.OfOracle)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%.0f ms\t%.0f ms\t%.0f ms\t%.0f tok/s\t%.1f%%\t%s\t%.2f\t%+.0f%%\t%+.0f%%\t%+.0f%%\t\n",
			s.Workload, s.Name, s.Requests, s.Errors, s.TTFTP50ms, s.TTFTP90ms, s.TTFTP99ms, s.ThroughputTokS,
			100*s.HitRate, oracle, s.Imbalance, s.TTFTP50ChangePct, s.TTFTP90ChangePct, s.ThroughputChangePct)
	}
	return tw.Flush()
}

// Markdown writes the summaries as a markdown table in the shape of the
// managed offering's published one (TTFT P50/P90 change, throughput
// change, hit rate).
func Markdown(w io.Writer, sums []Summary, baseline string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "| workload | config | TTFT p50 | TTFT p90 | throughput | hit rate | imbalance | TTFT p50 vs %s | TTFT p90 vs %s | throughput vs %s |\n", baseline, baseline, baseline)
	b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, s := range sums {
		fmt.Fprintf(&b, "| %s | %s | %.0f ms | %.0f ms | %.0f tok/s | %.1f%% | %.2f | %+.0f%% | %+.0f%% | %+.0f%% |\n",
			s.Workload, s.Name, s.TTFTP50ms, s.TTFTP90ms, s.ThroughputTokS, 100*s.HitRate, s.Imbalance,
			s.TTFTP50ChangePct, s.TTFTP90ChangePct, s.ThroughputChangePct)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteJSON writes v (summaries and context) indented to path.
func WriteJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	return nil
}

// Sorted returns sums ordered by workload, keeping each workload's order.
func Sorted(sums []Summary) []Summary {
	out := slices.Clone(sums)
	slices.SortStableFunc(out, func(a, b Summary) int { return cmp.Compare(a.Workload, b.Workload) })
	return out
}

func ms(d time.Duration) float64 { return round(float64(d) / float64(time.Millisecond)) }

func round(v float64) float64 { return math.Round(v*10) / 10 }

func round3(v float64) float64 { return math.Round(v*1000) / 1000 }

// ChangePct is v against base in percent, to one decimal (0 when base is
// 0): the report's "vs baseline" columns.
func ChangePct(v, base float64) float64 {
	if base == 0 {
		return 0
	}
	return round((v - base) / base * 100)
}
