//go:build race

package app

// raceEnabled: the race detector slows the router several times over,
// which skews the timing-sensitive balance checks.
const raceEnabled = true
