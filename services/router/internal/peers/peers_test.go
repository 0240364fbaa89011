package peers

import (
	"net"
	"slices"
	"testing"

	"github.com/warmpath/warmpath/services/router/internal/discovery"
)

func TestSet(t *testing.T) {
	self := "http://10.0.0.1:8080"
	s := New(self)
	if url, mine := s.Owner(7); !mine || url != self {
		t.Fatalf("no peers known: Owner = %s, %v; want every key this replica's", url, mine)
	}
	s.Update([]discovery.Target{{URL: "http://10.0.0.2:8080"}, {URL: self}, {URL: "http://10.0.0.3:8080"}})
	owners := map[string]int{}
	for k := range uint64(3000) {
		url, mine := s.Owner(k * 0x9e3779b97f4a7c15)
		if mine != (url == self) {
			t.Fatalf("Owner = %s, %v: self flag disagrees with the URL", url, mine)
		}
		owners[url]++
	}
	if got := s.Others(); !slices.Equal(got, []string{"http://10.0.0.2:8080", "http://10.0.0.3:8080"}) {
		t.Errorf("Others = %v, want the two replicas besides self", got)
	}
	if len(owners) != 3 {
		t.Errorf("keys owned by %d replicas, want all 3: %v", len(owners), owners)
	}
	for _, tc := range []struct {
		ip   string
		want bool
	}{
		{"10.0.0.2", true},
		{"10.0.0.1", true},
		{"10.0.0.9", false},
	} {
		if got := s.IsPeer(net.ParseIP(tc.ip)); got != tc.want {
			t.Errorf("IsPeer(%s) = %v, want %v", tc.ip, got, tc.want)
		}
	}
	if s.IsPeer(nil) {
		t.Error("IsPeer(nil) = true")
	}
	// A replica that left owns nothing any more.
	s.Update([]discovery.Target{{URL: self}})
	if url, mine := s.Owner(1); !mine {
		t.Errorf("alone again: Owner = %s, want this replica", url)
	}
}
