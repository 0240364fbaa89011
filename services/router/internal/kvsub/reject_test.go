package kvsub

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/warmpath/warmpath/libs/kvevents"
	"github.com/warmpath/warmpath/services/router/kvindex"
)

// TestRejectionsLogged: events the index rejects are logged with the
// worker and the reason, at most once per rejectWarnEvery per worker, and
// shown in the worker's stream health (/debug/endpoints).
func TestRejectionsLogged(t *testing.T) {
	var logs bytes.Buffer
	m := New(Config{Bind: "tcp://127.0.0.1:0"}, kvindex.New(100), slog.New(slog.NewTextHandler(&logs, nil)))
	const url = "http://10.0.0.5:8000"
	m.Start(context.Background(), url, nil)
	s := m.subs[url]
	w := kvindex.NewWorker(m.idx, url, "m", s.counters)
	parent := kvevents.IntHash(999)
	orphan := kvevents.Batch{Events: []kvevents.Event{kvevents.BlockStored{
		BlockHashes: []kvevents.BlockHash{kvevents.IntHash(1)}, ParentBlockHash: &parent,
		TokenIDs: []uint32{1, 2, 3, 4}, BlockSize: 4, Medium: "GPU",
	}}}

	t0 := time.Unix(1000, 0)
	m.noteRejections(s, t0)
	if logs.Len() != 0 {
		t.Fatalf("logged with nothing rejected: %s", logs.String())
	}
	w.Apply(orphan)
	m.noteRejections(s, t0)
	if got := strings.Count(logs.String(), "events rejected"); got != 1 {
		t.Fatalf("%d warnings after a rejection, want 1: %s", got, logs.String())
	}
	for _, want := range []string{"worker=" + url, "reason=unknown_parent", "parent block hash 999"} {
		if !strings.Contains(logs.String(), want) {
			t.Fatalf("warning lacks %q: %s", want, logs.String())
		}
	}
	// More rejections within the window are held for the next warning.
	w.Apply(orphan)
	w.Apply(orphan)
	m.noteRejections(s, t0.Add(time.Second))
	if got := strings.Count(logs.String(), "events rejected"); got != 1 {
		t.Fatalf("%d warnings within %v, want 1", got, rejectWarnEvery)
	}
	m.noteRejections(s, t0.Add(rejectWarnEvery))
	if got := strings.Count(logs.String(), "events rejected"); got != 2 || !strings.Contains(logs.String(), "rejected=2") {
		t.Fatalf("want a second warning counting the 2 held back: %s", logs.String())
	}

	h := m.Health()[url]
	if h.Rejected != 3 || h.LastRejection == nil || h.LastRejection.Reason != "unknown_parent" {
		t.Fatalf("health %+v, want 3 rejected, the last for unknown_parent", h)
	}
}
