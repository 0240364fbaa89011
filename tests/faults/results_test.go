package faults

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"
)

// resultsPath is bench/results/faults.json from this package's directory.
const resultsPath = "../../bench/results/faults.json"

// scenario is one test's record in faults.json.
type scenario struct {
	Passed   bool    `json:"passed"`
	Fault    string  `json:"fault"`
	Rate     float64 `json:"rate_per_second"`
	Duration float64 `json:"load_seconds"`
	// counts are the router scenarios' request counts; nil (left out) for
	// the cache server's.
	*counts
	// Extra holds a scenario's own counts (the cache server's reads, bytes
	// and connections).
	Extra map[string]float64 `json:"counts,omitempty"`
	// Recovery holds the scenario's recovery times, in seconds.
	Recovery map[string]float64 `json:"recovery_seconds"`
	// RouterRetries is the router's warmpath_router_retries_total by
	// reason at the end (since its last start).
	RouterRetries map[string]float64 `json:"router_retries,omitempty"`
	// PeakMemoryBytes is each container's peak memory in use (docker
	// stats, sampled every 0.5 s), for the router scenarios.
	PeakMemoryBytes map[string]float64 `json:"peak_memory_bytes,omitempty"`
	Timestamp       string             `json:"timestamp"`
	// peaks, when set, supplies PeakMemoryBytes as the test ends.
	peaks func() map[string]float64
}

var resultsMu sync.Mutex

// record writes sc under name into faults.json when the test ends, keeping
// the other scenarios' entries, with passed set from the test's outcome.
func record(t *testing.T, name string, sc *scenario) {
	t.Cleanup(func() {
		if sc.peaks != nil {
			sc.PeakMemoryBytes = sc.peaks()
		}
		sc.Passed = !t.Failed()
		sc.Timestamp = time.Now().UTC().Format(time.RFC3339)
		resultsMu.Lock()
		defer resultsMu.Unlock()
		// The other scenarios' entries are kept as they are: a scenario
		// does not survive a round trip through its Go type (the embedded
		// *counts cannot be unmarshalled).
		file := struct {
			Command    string                     `json:"command"`
			GoMaxProcs int                        `json:"gomaxprocs"`
			Scenarios  map[string]json.RawMessage `json:"scenarios"`
		}{}
		if b, err := os.ReadFile(resultsPath); err == nil {
			_ = json.Unmarshal(b, &file)
		}
		if file.Scenarios == nil {
			file.Scenarios = map[string]json.RawMessage{}
		}
		file.Command = "make test-integration (go test -count=1 ./tests/faults/)"
		file.GoMaxProcs = runtime.GOMAXPROCS(0)
		one, err := json.Marshal(sc)
		if err != nil {
			t.Errorf("faults.json: %v", err)
			return
		}
		file.Scenarios[name] = one
		b, err := json.MarshalIndent(file, "", "  ")
		if err != nil {
			t.Errorf("faults.json: %v", err)
			return
		}
		if err := os.MkdirAll(filepath.Dir(resultsPath), 0o755); err != nil {
			t.Errorf("faults.json: %v", err)
			return
		}
		if err := os.WriteFile(resultsPath, append(b, '\n'), 0o644); err != nil { //nolint:gosec // a committed result file
			t.Errorf("faults.json: %v", err)
		}
		t.Logf("%s: %s", name, one)
	})
}
