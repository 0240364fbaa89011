package strategy

import "testing"

func TestLeastLoaded(t *testing.T) {
	tests := []struct {
		name string
		eps  []Endpoint
		want string
	}{
		{"one", []Endpoint{{ID: "a", InFlight: 9}}, "a"},
		{"lowest in flight", []Endpoint{{ID: "a", InFlight: 3}, {ID: "b", InFlight: 1}, {ID: "c", InFlight: 2}}, "b"},
		{"ties keep the first", []Endpoint{{ID: "a", InFlight: 1}, {ID: "b", InFlight: 1}}, "a"},
		{"external load counts", []Endpoint{{ID: "a", External: 5}, {ID: "b", InFlight: 1}}, "b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := LeastLoaded(tt.eps)
			if d.Endpoint != tt.want || d.Strategy != NameLeastLoaded {
				t.Fatalf("LeastLoaded = %+v, want %s", d, tt.want)
			}
		})
	}
}
