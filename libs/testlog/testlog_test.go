package testlog

import (
	"log/slog"
	"testing"
)

func TestRecorderReadsBack(t *testing.T) {
	log, rec := New(slog.LevelInfo)
	log.Debug("hidden")
	log.Info("routed", "worker", "http://w", "ratio", 0.5)
	log.Warn("other")
	lines := rec.Lines()
	if len(lines) != 2 {
		t.Fatalf("%d lines, want 2: %v", len(lines), lines)
	}
	routed := WithMsg(lines, "routed")
	if len(routed) != 1 || routed[0].Level() != "INFO" || routed[0].String("worker") != "http://w" {
		t.Fatalf("routed lines %v", routed)
	}
	if v, ok := routed[0].Number("ratio"); !ok || v != 0.5 {
		t.Fatalf("ratio %v %v", v, ok)
	}
}

func TestParseSkipsOtherOutput(t *testing.T) {
	got := Parse("starting\n{\"msg\":\"a\"}\n[not json\n{broken\n\n{\"msg\":\"b\"}\n")
	if len(got) != 2 || got[0].Msg() != "a" || got[1].Msg() != "b" {
		t.Fatalf("parsed %v", got)
	}
}
