// Package peers keeps the set of router replicas that serve one endpoint
// and answers which of them owns a request (package peer decides the
// owner; this package knows who is there and who this replica is).
//
// The set comes from a discovery source, as the workers do: a static
// list, or the A records of a headless Service over the router pods. A
// replica is trusted to have forwarded a request when it comes from a
// peer's address, so forwarded requests need no shared secret: pods of
// the set are the only hosts those addresses belong to.
package peers

import (
	"net"
	"net/url"
	"slices"
	"sync"

	"github.com/warmpath/warmpath/services/router/hrw"
	"github.com/warmpath/warmpath/services/router/internal/discovery"
)

// Set is the current peer set. Its zero value is not usable; use New.
type Set struct {
	self string
	mu   sync.RWMutex
	ids  []string        // base URLs, sorted
	ips  map[string]bool // their hosts' addresses
}

// New returns an empty set for the replica whose base URL (as the peers'
// discovery reports it, e.g. http://10.0.0.7:8080) is self.
func New(self string) *Set {
	return &Set{self: self, ips: map[string]bool{}}
}

// Self is this replica's base URL.
func (s *Set) Self() string { return s.self }

// Update replaces the set; it is a discovery.Source's update function.
func (s *Set) Update(ts []discovery.Target) {
	ids := make([]string, 0, len(ts))
	ips := make(map[string]bool, len(ts))
	for _, t := range ts {
		ids = append(ids, t.URL)
		if u, err := url.Parse(t.URL); err == nil {
			if ip := net.ParseIP(u.Hostname()); ip != nil {
				ips[ip.String()] = true
			}
		}
	}
	slices.Sort(ids)
	s.mu.Lock()
	s.ids, s.ips = ids, ips
	s.mu.Unlock()
}

// Owner returns the base URL of the replica that owns key and whether it
// is this one. With no peers known, or only this replica, every key is
// this replica's.
func (s *Set) Owner(key uint64) (string, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	i := hrw.Owner(key, s.ids)
	if i < 0 || s.ids[i] == s.self {
		return s.self, true
	}
	return s.ids[i], false
}

// Others returns the base URLs of the other replicas in the set.
func (s *Set) Others() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]string, 0, len(s.ids))
	for _, id := range s.ids {
		if id != s.self {
			out = append(out, id)
		}
	}
	return out
}

// IsPeer says whether ip is the address of a replica in the set.
func (s *Set) IsPeer(ip net.IP) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return ip != nil && s.ips[ip.String()]
}
