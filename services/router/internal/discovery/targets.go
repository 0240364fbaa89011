package discovery

import (
	"net"
	"slices"
	"strconv"
	"strings"
)

// sortTargets orders ts by URL, then Name, so equal sets compare equal.
func sortTargets(ts []Target) {
	slices.SortFunc(ts, func(a, b Target) int {
		if c := strings.Compare(a.URL, b.URL); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
}

// hostURL returns scheme://host:port, bracketing IPv6 literals.
func hostURL(scheme, host string, port int) string {
	return scheme + "://" + net.JoinHostPort(host, strconv.Itoa(port))
}

// changeFilter remembers the last set reported so a source reports a set
// only when it differs from the previous one (and always the first time).
// The zero value reports its first set. Not safe for concurrent use.
type changeFilter struct {
	reported bool
	last     []Target
}

// changed reports whether ts (sorted) differs from the last set passed to
// it, and remembers ts.
func (f *changeFilter) changed(ts []Target) bool {
	if f.reported && slices.Equal(f.last, ts) {
		return false
	}
	f.reported = true
	f.last = ts
	return true
}
