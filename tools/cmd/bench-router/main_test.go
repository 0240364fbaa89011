package main

import "testing"

func TestQuickRequested(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want bool
	}{
		{"none", nil, false},
		{"double dash", []string{"--targets", "direct", "--quick"}, true},
		{"single dash", []string{"-quick"}, true},
		{"explicit true", []string{"--quick=true"}, true},
		{"explicit false", []string{"--quick=false"}, false},
		{"after terminator", []string{"--", "--quick"}, false},
		{"other flag value", []string{"--out", "quick"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := quickRequested(tt.args); got != tt.want {
				t.Errorf("quickRequested(%q) = %v, want %v", tt.args, got, tt.want)
			}
		})
	}
}

func TestParseInts(t *testing.T) {
	got, err := parseInts(" 1, 4,16 ,")
	if err != nil || len(got) != 3 || got[0] != 1 || got[1] != 4 || got[2] != 16 {
		t.Errorf("parseInts = %v, %v; want [1 4 16]", got, err)
	}
	if _, err := parseInts("1,x"); err == nil {
		t.Error("parseInts(1,x): got nil error")
	}
}
