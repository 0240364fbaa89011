package proxy

import (
	"log/slog"
	"time"

	"golang.org/x/time/rate"

	"github.com/warmpath/warmpath/services/router/strategy"
)

// routedSampler decides the level of each routing decision's `routed`
// line: INFO for at most a configured number of lines a second, DEBUG for
// the rest. An operator verifying cache-aware routing from a production
// log (at INFO) sees a steady sample however busy the router is, while
// --log-level debug still shows every decision.
type routedSampler struct {
	lim *rate.Limiter // nil: never INFO
}

// newRoutedSampler allows perSecond INFO lines a second; 0 (or less)
// allows none. The bucket holds one token, so no burst exceeds the rate:
// the sample is spread over time, not taken from the first requests of
// each second.
func newRoutedSampler(perSecond float64) routedSampler {
	if perSecond <= 0 {
		return routedSampler{}
	}
	return routedSampler{lim: rate.NewLimiter(rate.Limit(perSecond), 1)}
}

// level is the level of a `routed` line at now: INFO when a token is left.
func (s routedSampler) level(now time.Time) slog.Level {
	if s.lim != nil && s.lim.AllowN(now, 1) {
		return slog.LevelInfo
	}
	return slog.LevelDebug
}

// logRouted logs the routing decision c for an attempt: at INFO when the
// sampler allows, else at DEBUG. Nothing is built when the level is off.
func (s *Server) logRouted(x *exchange, c choice) {
	level := s.routed.level(time.Now())
	if !s.log.Enabled(x.ctx, level) {
		return
	}
	d := &c.dec
	attrs := make([]slog.Attr, 0, 14)
	attrs = append(attrs, slog.String("strategy", x.strategy), slog.String("worker", c.ep.URL),
		slog.String("model", x.parsed.model), slog.Int("attempt", len(x.tries)))
	if x.cacheAware {
		attrs = append(attrs, slog.Int("matched_chunks", d.MatchedChunks), slog.Int("prompt_chunks", d.TotalChunks),
			slog.Float64("match_ratio", d.MatchRatio))
	}
	if x.strategy == strategy.NameKVAware {
		// Which cache tier the strategy credited, and what is left to
		// compute.
		attrs = append(attrs, slog.Int("gpu_blocks", d.TierBlocks[0]), slog.Int("cpu_blocks", d.TierBlocks[1]),
			slog.Int("l2_blocks", d.TierBlocks[2]), slog.Int("prefill_tokens", d.PrefillTokens))
	}
	if d.Fallback != "" {
		attrs = append(attrs, slog.String("fallback", d.Fallback))
	}
	x.log().LogAttrs(x.ctx, level, "routed", attrs...)
}
