package telemetry_test

import (
	"strings"
	"testing"

	"github.com/warmpath/warmpath/libs/telemetry"
)

// TestNewRegistryHasRuntimeCollectors: the router, cache server and
// simulator serve their go_* and process_* series from this registry alone.
func TestNewRegistryHasRuntimeCollectors(t *testing.T) {
	mfs, err := telemetry.NewRegistry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var goSeries, processSeries bool
	for _, mf := range mfs {
		goSeries = goSeries || strings.HasPrefix(mf.GetName(), "go_")
		processSeries = processSeries || strings.HasPrefix(mf.GetName(), "process_")
	}
	if !goSeries || !processSeries {
		t.Fatalf("go_* gathered %v, process_* gathered %v; want both", goSeries, processSeries)
	}
}
