//go:build race

package router

// raceEnabled: the race detector slows this process — the clients and the
// in-flight sampler — several times over, which skews the timing-sensitive
// balance checks (the router binary itself is built without it).
const raceEnabled = true
