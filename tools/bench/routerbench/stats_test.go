package routerbench

import (
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	hundred := make([]time.Duration, 100)
	for i := range hundred {
		hundred[i] = time.Duration(i+1) * time.Microsecond
	}
	tests := []struct {
		name   string
		sorted []time.Duration
		p      float64
		want   time.Duration
	}{
		{"one sample", []time.Duration{7}, 99, 7},
		{"p50 of 100", hundred, 50, 50 * time.Microsecond},
		{"p99 of 100", hundred, 99, 99 * time.Microsecond},
		{"p99.9 of 100 is the max", hundred, 99.9, 100 * time.Microsecond},
		{"p100", hundred, 100, 100 * time.Microsecond},
		{"tiny p is the min", hundred, 0.001, time.Microsecond},
		{"p50 of 4 is the 2nd", []time.Duration{1, 2, 3, 4}, 50, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Percentile(tt.sorted, tt.p); got != tt.want {
				t.Errorf("Percentile(p%v) = %v, want %v", tt.p, got, tt.want)
			}
		})
	}
}

func TestSummarize(t *testing.T) {
	d := []time.Duration{4000, 1000, 3000, 2000} // ns, unsorted
	got := Summarize(d)
	want := Summary{Count: 4, MeanUS: 2.5, P50US: 2, P90US: 4, P99US: 4, P999US: 4, MaxUS: 4}
	if got != want {
		t.Errorf("Summarize = %+v, want %+v", got, want)
	}
	if got := Summarize(nil); got != (Summary{}) {
		t.Errorf("Summarize(nil) = %+v, want zero", got)
	}
}
