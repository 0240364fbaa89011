package l2events

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"

	"github.com/warmpath/warmpath/libs/openai"
)

// ErrSnapshotTooLarge is returned by Snapshot for a model holding more
// chunks than Config.MaxSnapshot.
var ErrSnapshotTooLarge = errors.New("kv events: snapshot too large")

// Snapshot returns the chunk hashes the stream says model has in the store,
// sorted, and the seq of the last batch they include (-1 before the first).
//
// Why it is consistent with the stream: every batch is published by pass or
// rebuild with mu held, together with the change of the view it describes,
// and Snapshot reads the view and the publisher's count of batches with mu
// held too. So the hashes are exactly the view after batches 0..seq, and
// every batch after seq describes a change to them. A subscriber that
// subscribes first, then fetches the snapshot, then applies the batches it
// received with seq > snapshot seq has the view the stream describes, with
// no event lost or applied twice. (Batches it received with seq <= the
// snapshot's are already in it.)
func (t *Tracker) Snapshot(model string) (seq int64, hashes [][HashLen]byte, err error) {
	t.mu.Lock()
	set := t.models[model]
	if len(set) > t.cfg.MaxSnapshot {
		t.mu.Unlock()
		return 0, nil, fmt.Errorf("%w: model %q holds %d chunks, more than %d", ErrSnapshotTooLarge, model, len(set), t.cfg.MaxSnapshot)
	}
	hashes = make([][HashLen]byte, 0, len(set))
	for h := range set {
		hashes = append(hashes, h)
	}
	seq = int64(t.pub.Sequenced()) - 1
	t.mu.Unlock()
	slices.SortFunc(hashes, func(a, b [HashLen]byte) int { return bytes.Compare(a[:], b[:]) })
	return seq, hashes, nil
}

// ServeSnapshot answers GET /v1/kv-events/snapshot?model=<m> with
// {"seq": <n>, "hashes": ["<64 hex>", ...]} (see Snapshot), written as it
// is encoded rather than built in memory.
func (t *Tracker) ServeSnapshot(w http.ResponseWriter, r *http.Request) {
	model := r.URL.Query().Get("model")
	if model == "" {
		openai.WriteError(w, openai.ParamErrorf("model", "the model whose chunks to list is required"))
		return
	}
	seq, hashes, err := t.Snapshot(model)
	if err != nil {
		openai.WriteError(w, openai.Errorf(http.StatusInsufficientStorage, "%v", err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	bw := bufio.NewWriterSize(w, 64<<10)
	buf := make([]byte, 0, 2*HashLen+3)
	_, _ = bw.WriteString(`{"seq":` + strconv.FormatInt(seq, 10) + `,"hashes":[`)
	for i, h := range hashes {
		buf = buf[:0]
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, '"')
		buf = hex.AppendEncode(buf, h[:])
		buf = append(buf, '"')
		if _, err := bw.Write(buf); err != nil {
			return // the client went away
		}
	}
	_, _ = bw.WriteString("]}\n")
	_ = bw.Flush()
}
