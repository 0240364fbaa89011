package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDESCommandWritesTheRoutingReport(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "routing.json")
	cfg := filepath.Join(dir, "strategy.json")
	if err := os.WriteFile(cfg, []byte(`{"loadGuard": {"window": 2, "ratio": 0.2}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	err := run(t.Context(), []string{"des", "--workload", "shared-prefix", "--sp-groups", "4", "--sp-prompts", "4",
		"--sp-system", "512", "--workers", "2", "--gpu-blocks", "1024", "--strategy-config", cfg, "--out", out})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Strategies []struct {
			Name    string  `json:"name"`
			HitRate float64 `json:"hit_rate"`
			Oracle  float64 `json:"oracle_hit_rate"`
		} `json:"strategies"`
		Goal           map[string]any `json:"goal"`
		StrategyConfig struct {
			LoadGuard struct {
				Window float64 `json:"window"`
			} `json:"loadGuard"`
			PrefixAware struct {
				Offload int `json:"offloadCapacityTokens"`
			} `json:"prefixAware"`
		} `json:"strategy_config"`
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Strategies) != 4 || rep.Goal["met"] == nil {
		t.Fatalf("report %s: want 4 strategies and a goal verdict", b)
	}
	for _, s := range rep.Strategies {
		if s.Oracle <= 0 || s.HitRate > s.Oracle {
			t.Errorf("%s: hit rate %v, oracle %v", s.Name, s.HitRate, s.Oracle)
		}
	}
	// The file's setting is kept; the L1 (5 GB by default) is counted for prefixaware.
	if rep.StrategyConfig.LoadGuard.Window != 2 || rep.StrategyConfig.PrefixAware.Offload != 38146 {
		t.Errorf("strategy config %+v", rep.StrategyConfig)
	}
}

func TestUnknownCommand(t *testing.T) {
	if err := run(t.Context(), []string{"nope"}); err == nil || !strings.Contains(err.Error(), "unknown command") {
		t.Fatalf("err = %v", err)
	}
}

func TestDESRunsEveryShape(t *testing.T) {
	small := map[string][]string{
		"many-short-chats":  {"--msc-users", "6", "--msc-groups", "2", "--msc-system", "128", "--msc-max-rounds", "4"},
		"few-long-docs":     {"--fld-docs", "2", "--fld-min-tokens", "1024", "--fld-max-tokens", "2048", "--fld-questions", "3"},
		"bursty-fanout":     {"--bf-contexts", "2", "--bf-min-context", "512", "--bf-max-context", "1024", "--bf-bursts", "2", "--bf-max-fanout", "16"},
		"skewed-popularity": {"--skew-prefixes", "20", "--skew-max-prefix", "2048", "--skew-requests", "30", "--skew-s", "1.2"},
	}
	for _, shape := range shapeNames() {
		t.Run(shape, func(t *testing.T) {
			flags, ok := small[shape]
			if !ok {
				t.Fatalf("no test size for %s", shape)
			}
			out := filepath.Join(t.TempDir(), "r.json")
			args := append([]string{"des", "--workload", shape, "--workers", "2", "--gpu-blocks", "1024",
				"--strategies", "roundrobin,kvaware", "--out", out}, flags...)
			if err := run(t.Context(), args); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			var rep struct {
				Workload string `json:"workload"`
				Requests int    `json:"requests"`
			}
			if err := json.Unmarshal(b, &rep); err != nil {
				t.Fatal(err)
			}
			if rep.Workload != shape || rep.Requests == 0 {
				t.Errorf("report names %q with %d requests, want %s", rep.Workload, rep.Requests, shape)
			}
		})
	}
}

func TestReportName(t *testing.T) {
	tests := []struct{ name, trace, want string }{
		{"few-long-docs", "", "few-long-docs"},
		{"trace", "", "mooncake_synthetic_trace"},
		{"trace", "/x/conversation_trace.jsonl", "conversation_trace"},
	}
	for _, tt := range tests {
		w := workloadFlags{name: tt.name, trace: tt.trace}
		if got := w.reportName(); got != tt.want {
			t.Errorf("%s %q: %q, want %q", tt.name, tt.trace, got, tt.want)
		}
	}
}
