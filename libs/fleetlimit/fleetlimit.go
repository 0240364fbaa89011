// Package fleetlimit divides an endpoint-wide request limit among the
// router replicas that enforce it. The operator writes each router's share
// into its configuration; the live tests start routers with the same
// shares, so both follow this one rule.
package fleetlimit

// PerReplica is one router's share of limit among replicas routers.
// Dividing needs no state shared between the routers, and the share is
// rounded down so that together they never admit more than limit; the
// cost is that one router can be full while another has room (a Service
// spreads connections, not requests, evenly) and the remainder of the
// division is never used. A positive limit leaves each router at least 1,
// so that no router is left with 0, which means unlimited: with fewer
// slots than routers the fleet admits replicas, more than limit
// (Overcommitted reports it). 0 (unlimited, or no queue) stays 0, and
// with at most one router the whole limit is its own.
func PerReplica(limit, replicas int32) int32 {
	if limit <= 0 || replicas <= 1 {
		return limit
	}
	return max(limit/replicas, 1)
}

// Fleet is what replicas routers admit together, each holding
// PerReplica(limit, replicas): at most limit, except when Overcommitted.
func Fleet(limit, replicas int32) int32 {
	return PerReplica(limit, replicas) * max(replicas, 1)
}

// Overcommitted reports whether the routers together admit more than
// limit: a positive limit smaller than the number of routers, each of
// which still takes one.
func Overcommitted(limit, replicas int32) bool {
	return limit > 0 && replicas > limit
}
