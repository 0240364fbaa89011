package procstat

import (
	"os"
	"testing"
	"time"
)

func TestParseCPU(t *testing.T) {
	for _, tc := range []struct {
		name, stat string
		want       time.Duration
		ok         bool
	}{
		{"plain", "42 (router) S 1 42 42 0 -1 4194560 100 0 0 0 250 130 0 0 20 0 9 0 1000 0 0", 3800 * time.Millisecond, true},
		{"name with spaces and parens", "7 (a (b) c) R 1 7 7 0 -1 0 0 0 0 0 1 2 0 0 20 0 1 0 5 0 0", 30 * time.Millisecond, true},
		{"no name", "7 a R 1", 0, false},
		{"truncated", "7 (a) R 1 2 3", 0, false},
		{"not a number", "7 (a) R 1 7 7 0 -1 0 0 0 0 0 x 2 0", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseCPU(tc.stat)
			if (err == nil) != tc.ok || got != tc.want {
				t.Fatalf("parseCPU = %v, %v; want %v, ok %v", got, err, tc.want, tc.ok)
			}
		})
	}
}

func TestReadSelf(t *testing.T) {
	// Burn some CPU so the reading has something to show.
	began := time.Now()
	for x := 0; time.Since(began) < 50*time.Millisecond; x++ {
		_ = x * x
	}
	s, err := Read(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if s.CPU <= 0 || s.RSS <= 0 || s.PeakRSS < s.RSS {
		t.Fatalf("%+v: want CPU time, RSS and a peak at least the RSS", s)
	}
	if _, err := Read(-1); err == nil {
		t.Fatal("a process that does not exist was read")
	}
}
