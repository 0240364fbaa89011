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
