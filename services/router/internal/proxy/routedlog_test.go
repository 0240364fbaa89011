package proxy

import (
	"log/slog"
	"math"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/warmpath/warmpath/libs/testlog"
	"github.com/warmpath/warmpath/services/router/kvindex"
	"github.com/warmpath/warmpath/services/router/strategy"
)

// TestRoutedSamplerRate: over any stretch of time the sampler lets at most
// its rate of lines (plus the one token the bucket starts with) out at
// INFO, however many decisions are made; 0 lets none.
func TestRoutedSamplerRate(t *testing.T) {
	tests := []struct {
		perSecond float64
		calls     int           // decisions, evenly spread over span
		span      time.Duration // simulated
	}{
		{0, 1000, 10 * time.Second},
		{0.5, 1000, 10 * time.Second},
		{1, 1000, 10 * time.Second},
		{1, 3, 10 * time.Second}, // fewer decisions than allowed: all at INFO
		{100, 10000, 10 * time.Second},
	}
	for _, tt := range tests {
		s := newRoutedSampler(tt.perSecond)
		start := time.Unix(1000, 0)
		infos := 0
		for i := range tt.calls {
			now := start.Add(time.Duration(i) * tt.span / time.Duration(tt.calls))
			if s.level(now) == slog.LevelInfo {
				infos++
			}
		}
		bound := min(tt.calls, int(math.Floor(tt.perSecond*tt.span.Seconds()))+1)
		if tt.perSecond == 0 {
			bound = 0
		}
		// Evenly spread decisions use (nearly) every token that accrues.
		if infos > bound || infos < bound-1 {
			t.Errorf("%v/s, %d decisions over %v: %d at INFO, want %d (or one fewer)", tt.perSecond, tt.calls, tt.span, infos, bound)
		}
	}
}

// TestRoutedLines: every decision logs `routed` (at DEBUG when the sample
// is used up), with the strategy, worker, model, request id and match; a
// decision with nothing to route on says why and is counted, each one.
func TestRoutedLines(t *testing.T) {
	doc := strings.Repeat("a policy clause to keep records for audit. ", 20) // 6 whole chunks of 128 bytes
	tests := []struct {
		name     string
		strategy strategy.Strategy
		// fallbacks are the routed lines' fallback fields, in order.
		fallbacks []string
		// counted is the routing_fallbacks_total series that counts them.
		counted [2]string
	}{
		{"prefixaware: the first of a prompt finds nothing cached",
			strategy.NewPrefixAware(strategy.PrefixAwareConfig{}, strategy.LoadGuardConfig{Window: 1}),
			[]string{strategy.FallbackNoPrefixCached, "", "", "", ""},
			[2]string{strategy.NamePrefixAware, strategy.FallbackNoPrefixCached}},
		{"kvaware without a tokenizer has no token ids",
			strategy.NewKVAware(strategy.KVAwareConfig{}, strategy.LoadGuardConfig{Window: 1}, kvindex.New(1<<10),
				strategy.NewPrefixAware(strategy.PrefixAwareConfig{}, strategy.LoadGuardConfig{Window: 1})),
			[]string{strategy.FallbackNoTokens, strategy.FallbackNoTokens, strategy.FallbackNoTokens, strategy.FallbackNoTokens, strategy.FallbackNoTokens},
			[2]string{strategy.NameKVAware, strategy.FallbackNoTokens}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			log, rec := testlog.New(slog.LevelDebug)
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			cfg := productionConfig()
			cfg.RoutedLogPerSecond = 1
			start := time.Now()
			f := startFleetWith(t, ln, cfg, fleetOptions{strategy: tt.strategy, log: log}, ok, ok)
			for range tt.fallbacks {
				if code := f.post(t, doc); code != 200 {
					t.Fatalf("status %d", code)
				}
			}
			elapsed := time.Since(start)

			routed := testlog.WithMsg(rec.Lines(), "routed")
			if len(routed) != len(tt.fallbacks) {
				t.Fatalf("%d routed lines for %d requests at DEBUG", len(routed), len(tt.fallbacks))
			}
			infos := 0
			for i, l := range routed {
				if l.Level() == "INFO" {
					infos++
				}
				if l.String("fallback") != tt.fallbacks[i] {
					t.Errorf("request %d: fallback %q, want %q", i, l.String("fallback"), tt.fallbacks[i])
				}
				if l.String("worker") == "" || l.String("model") != "m" || l.String("request_id") == "" || l.String("strategy") != strategy.NamePrefixAware {
					t.Errorf("request %d: routed line %v", i, l)
				}
				if n, _ := l.Number("prompt_chunks"); n != 6 {
					t.Errorf("request %d: prompt_chunks %v, want 6", i, n)
				}
				if _, ok := l.Number("match_ratio"); !ok {
					t.Errorf("request %d: no match_ratio: %v", i, l)
				}
			}
			if most := 1 + int(elapsed.Seconds()); infos < 1 || infos > most {
				t.Errorf("%d routed lines at INFO in %v, want 1 to %d", infos, elapsed, most)
			}
			want := 0
			for _, fb := range tt.fallbacks {
				if fb != "" {
					want++
				}
			}
			if got := testutil.ToFloat64(f.metrics.RoutingFallbacks.WithLabelValues(tt.counted[0], tt.counted[1])); got != float64(want) {
				t.Errorf("routing_fallbacks_total%v = %v, want %d", tt.counted, got, want)
			}
		})
	}
}
