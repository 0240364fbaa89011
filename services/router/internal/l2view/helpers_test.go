package l2view

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/warmpath/warmpath/libs/blockhash"
	"github.com/warmpath/warmpath/libs/kvevents"
)

// fakeServer is a cache server's view and stream: every change is a batch
// with the next seq, and its snapshot endpoint answers the current view.
type fakeServer struct {
	t   *testing.T
	srv *httptest.Server

	mu      sync.Mutex
	seq     int64 // seq of the last batch, -1 none
	models  map[string]map[blockhash.Hash]bool
	token   string
	fail    bool
	fetches int
}

func newFakeServer(t *testing.T) *fakeServer {
	f := &fakeServer{t: t, seq: -1, models: map[string]map[blockhash.Hash]bool{}}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeServer) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fetches++
	if f.fail {
		http.Error(w, "down", http.StatusServiceUnavailable)
		return
	}
	if f.token != "" && r.Header.Get("Authorization") != "Bearer "+f.token {
		http.Error(w, "no", http.StatusUnauthorized)
		return
	}
	var hs []string
	for h := range f.models[r.URL.Query().Get("model")] {
		hs = append(hs, hex.EncodeToString(h[:]))
	}
	slices.Sort(hs)
	var b bytes.Buffer
	fmt.Fprintf(&b, `{"seq":%d,"hashes":[`, f.seq)
	for i, h := range hs {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%q", h)
	}
	b.WriteString("]}")
	_, _ = w.Write(b.Bytes())
}

// change applies events to the server's view and returns their batch.
func (f *fakeServer) change(model string, evs ...kvevents.Event) kvevents.Message {
	f.t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	set := f.models[model]
	if set == nil {
		set = map[blockhash.Hash]bool{}
		f.models[model] = set
	}
	for _, ev := range evs {
		switch ev := ev.(type) {
		case kvevents.BlockStored:
			for _, h := range ev.BlockHashes {
				set[blockhash.Hash(h.Bytes())] = true
			}
		case kvevents.BlockRemoved:
			for _, h := range ev.BlockHashes {
				delete(set, blockhash.Hash(h.Bytes()))
			}
		}
	}
	f.seq++
	p, err := kvevents.EncodeBatch(kvevents.Batch{TS: 1, Events: evs}, kvevents.MapEncoding)
	if err != nil {
		f.t.Fatal(err)
	}
	return kvevents.Message{Topic: topicPrefix + model, Seq: uint64(f.seq), Payload: p}
}

// restart is a new server process: empty, seq from 0 again.
func (f *fakeServer) restart() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seq, f.models = -1, map[string]map[blockhash.Hash]bool{}
}

func hashOf(i int) blockhash.Hash {
	var h blockhash.Hash
	h[0], h[31] = byte(i>>8), byte(i)
	h[30] = 0xAB
	return h
}

func stored(hs ...blockhash.Hash) kvevents.BlockStored {
	out := kvevents.BlockStored{Medium: "L2"}
	for _, h := range hs {
		out.BlockHashes = append(out.BlockHashes, kvevents.BytesHash(h[:]))
	}
	return out
}

func removed(hs ...blockhash.Hash) kvevents.BlockRemoved {
	out := kvevents.BlockRemoved{Medium: "L2"}
	for _, h := range hs {
		out.BlockHashes = append(out.BlockHashes, kvevents.BytesHash(h[:]))
	}
	return out
}

// newTestView is a view over the fake servers, not running: tests feed
// its endpoints' handle directly.
func newTestView(t *testing.T, cfg Config, servers ...*fakeServer) *View {
	t.Helper()
	for i, s := range servers {
		cfg.Endpoints = append(cfg.Endpoints, Endpoint{Events: fmt.Sprintf("tcp://127.0.0.1:%d", 1+i), SnapshotURL: s.srv.URL})
	}
	if cfg.HashSeed == "" {
		cfg.HashSeed = "0"
	}
	cfg.SnapshotTimeout = 5 * time.Second
	v, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func feed(t *testing.T, e *endpoint, msgs ...kvevents.Message) {
	t.Helper()
	for _, m := range msgs {
		if err := e.handle(context.Background(), m); err != nil {
			t.Fatalf("handle seq %d: %v", m.Seq, err)
		}
	}
}

// held lists which of hashes 0..n-1 the view holds for model.
func held(v *View, model string, n int) []int {
	var out []int
	for i := range n {
		if v.holders(model, keyOf(hashOf(i))) > 0 {
			out = append(out, i)
		}
	}
	return out
}
