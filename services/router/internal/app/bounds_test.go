package app

import (
	"testing"

	"github.com/warmpath/warmpath/services/router/kvindex"
)

// TestKVWorkerBound: the workers' event state takes its bound from the
// in-memory index's limits, and from the option for a store that has none
// (Redis).
func TestKVWorkerBound(t *testing.T) {
	a := &App{opts: Options{KVWorkerMaxBlocks: 5}}
	idx := kvindex.NewBounded(kvindex.Limits{MaxKeys: 100, MaxWorkerBlocks: 7})
	if got := (confirming{kvStore: idx, app: a}).MaxWorkerBlocks(); got != 7 {
		t.Errorf("in-memory index: bound %d, want 7", got)
	}
	opaque := struct{ kvStore }{idx} // hides MaxWorkerBlocks, as kvredis has none
	if got := (confirming{kvStore: opaque, app: a}).MaxWorkerBlocks(); got != 5 {
		t.Errorf("store without limits: bound %d, want the option's 5", got)
	}
}
