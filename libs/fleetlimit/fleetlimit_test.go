package fleetlimit

import "testing"

func TestPerReplica(t *testing.T) {
	tests := []struct {
		name            string
		limit, replicas int32
		per, fleet      int32
		overcommitted   bool
	}{
		{"one router holds the whole limit", 64, 1, 64, 64, false},
		{"divides evenly", 64, 4, 16, 64, false},
		{"rounds down: 3 x 2 = 6 <= 7", 7, 3, 2, 6, false},
		{"fewer slots than routers: 1 each, the fleet admits 3 > 2", 2, 3, 1, 3, true},
		{"as many slots as routers", 3, 3, 1, 3, false},
		{"unlimited stays unlimited", 0, 3, 0, 0, false},
		{"zero routers: nothing to divide among", 8, 0, 8, 8, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := PerReplica(tt.limit, tt.replicas); got != tt.per {
				t.Errorf("PerReplica(%d, %d) = %d, want %d", tt.limit, tt.replicas, got, tt.per)
			}
			if got := Fleet(tt.limit, tt.replicas); got != tt.fleet {
				t.Errorf("Fleet(%d, %d) = %d, want %d", tt.limit, tt.replicas, got, tt.fleet)
			}
			if got := Overcommitted(tt.limit, tt.replicas); got != tt.overcommitted {
				t.Errorf("Overcommitted(%d, %d) = %v, want %v", tt.limit, tt.replicas, got, tt.overcommitted)
			}
		})
	}
}
