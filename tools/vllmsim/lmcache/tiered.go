package lmcache

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2/simplelru"

	"github.com/warmpath/warmpath/libs/blockhash"
	"github.com/warmpath/warmpath/tools/vllmsim/engine"
)

// ErrMiss is what a Remote returns for a key it does not hold.
var ErrMiss = errors.New("lmcache: remote miss")

// Remote is the shared L2 as LMCache's remote connector sees it.
type Remote interface {
	Exists(ctx context.Context, key string) (bool, error)
	// Get returns the value or ErrMiss. The value may be reused by the
	// next Get: callers check it and let it go.
	Get(ctx context.Context, key string) ([]byte, error)
	Put(ctx context.Context, key string, value []byte) error
}

// RemoteObserver sees every remote transfer (metrics).
type RemoteObserver interface {
	ObserveGet(d time.Duration, bytes int)
	ObservePut(d time.Duration, bytes int)
}

// RemoteConfig configures the L2 behind an L1.
type RemoteConfig struct {
	Remote Remote
	// KeyPrefix and KeySuffix surround each chunk's hash in hex, as LMCache
	// builds keys: "model@world_size@worker_id@" + hash + "@dtype".
	KeyPrefix, KeySuffix string
	// Scale divides the real chunk size: each stored value is
	// L1.ChunkBytes()/Scale bytes, so a laptop can hold a fleet's KV.
	Scale int64
	// NetworkSeconds is the modelled network time to fetch tokens' full-size
	// KV; a fetch is charged this or the measured wall time of the real
	// (scaled) transfer, whichever is longer, so a slow or overloaded L2
	// shows in TTFT. The measured time counts as engine time one to one:
	// under a time scale the L2 is taken to speed up with the GPU.
	NetworkSeconds func(tokens int) float64
	// Timeout bounds each remote call (2s when zero).
	Timeout time.Duration
	// Backoff is how long the remote is skipped after an error (1s when zero).
	Backoff time.Duration
	// QueueLen bounds stores waiting to be written (256 when zero); more
	// are dropped and counted, as LMCache drops puts it cannot keep up with.
	QueueLen int
	// KnownChunks bounds the set of chunks known to be in L2, which spares
	// writing them again (65536 when zero).
	KnownChunks int
	Observer    RemoteObserver
	Log         *slog.Logger
}

// RemoteCounters are cumulative L2 totals, the sources of LMCache's
// lmcache:num_remote_* metrics. Bytes are the (scaled) bytes on the wire.
type RemoteCounters struct {
	LookupHits    int64 // tokens found in L2 beyond L1
	ReadRequests  int64
	ReadBytes     int64
	WriteRequests int64
	WriteBytes    int64
	Errors        int64 // failed calls (each starts a backoff)
	Corrupt       int64 // values that were not what was stored
	DroppedPuts   int64 // stores dropped because the queue was full
}

// Tiered is the LMCache connector with both tiers: L1 in CPU RAM and a
// shared L2 reached through a Remote. Lookups consult L1 then L2 (a
// contains call per chunk not known to be there, stopping at the first
// miss, as LMCache does);
// the engine fetches an L2 hit through FetchRemote, which moves the real
// bytes, checks them and promotes the chunks into L1; stores go to L1 at
// once and to L2 from a background writer.
type Tiered struct {
	*L1
	cfg        RemoteConfig
	valueBytes int

	puts chan put
	done chan struct{}

	mu        sync.Mutex
	known     *lru.LRU[blockhash.Hash, struct{}]
	counters  RemoteCounters
	downUntil time.Time
}

type put struct {
	hash blockhash.Hash
}

var (
	_ engine.Connector = (*Tiered)(nil)
	_ engine.Fetcher   = (*Tiered)(nil)
)

// NewTiered puts an L2 behind l1 and starts its writer, which runs until
// ctx ends or Close is called.
func NewTiered(ctx context.Context, l1 *L1, cfg RemoteConfig) (*Tiered, error) {
	if l1 == nil || cfg.Remote == nil {
		return nil, errors.New("lmcache: tiered needs an L1 and a remote")
	}
	if cfg.Scale < 1 {
		cfg.Scale = 1
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 2 * time.Second
	}
	if cfg.Backoff <= 0 {
		cfg.Backoff = time.Second
	}
	if cfg.QueueLen <= 0 {
		cfg.QueueLen = 256
	}
	if cfg.KnownChunks <= 0 {
		cfg.KnownChunks = 1 << 16
	}
	if cfg.NetworkSeconds == nil {
		cfg.NetworkSeconds = func(int) float64 { return 0 }
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	valueBytes := l1.ChunkBytes() / cfg.Scale
	if valueBytes < blockhash.Size {
		return nil, fmt.Errorf("lmcache: chunk of %d bytes scaled by 1/%d is below %d bytes", l1.ChunkBytes(), cfg.Scale, blockhash.Size)
	}
	known, err := lru.NewLRU[blockhash.Hash, struct{}](cfg.KnownChunks, nil)
	if err != nil {
		return nil, fmt.Errorf("lmcache: %w", err)
	}
	t := &Tiered{L1: l1, cfg: cfg, valueBytes: int(valueBytes), known: known,
		puts: make(chan put, cfg.QueueLen), done: make(chan struct{})}
	go t.writer(ctx)
	return t, nil
}

// Close stops the writer; stores still queued are dropped.
func (t *Tiered) Close() {
	select {
	case <-t.done:
	default:
		close(t.done)
	}
}

// SetObserver sets the observer of remote transfers (metrics, built after
// the connector).
func (t *Tiered) SetObserver(o RemoteObserver) {
	t.mu.Lock()
	t.cfg.Observer = o
	t.mu.Unlock()
}

func (t *Tiered) observer() RemoteObserver {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.cfg.Observer
}

// ValueBytes is the size of one stored L2 value.
func (t *Tiered) ValueBytes() int { return t.valueBytes }

// Key is the L2 key of a chunk.
func (t *Tiered) Key(h blockhash.Hash) string {
	return t.cfg.KeyPrefix + hex.EncodeToString(h[:]) + t.cfg.KeySuffix
}

// Lookup implements engine.Connector: L1's leading chunks, then those L2
// holds after them.
func (t *Tiered) Lookup(tokens []uint32, extra []string) engine.Hit {
	hit := t.L1.Lookup(tokens, extra)
	if !t.up() {
		return hit
	}
	cs := t.L1.cfg.ChunkSize
	hashes := t.hasher.Chain(tokens, cs, extra)
	remote := 0
	for _, h := range hashes[hit.CPU/cs:] {
		if !t.isKnown(h) {
			ok, err := t.exists(h)
			if err != nil || !ok {
				break
			}
			t.mu.Lock()
			t.known.Add(h, struct{}{})
			t.mu.Unlock()
		}
		remote += cs
	}
	if remote > 0 {
		t.L1.mu.Lock()
		t.L1.counters.LookupHits += int64(remote)
		t.L1.mu.Unlock()
		t.mu.Lock()
		t.counters.LookupHits += int64(remote)
		t.mu.Unlock()
	}
	hit.Remote = remote
	return hit
}

// isKnown reports whether h was written, fetched or found in L2 before.
// The engine looks a waiting request up at every step until it is
// admitted; asking L2 each time would cost a round trip per chunk per step.
// A known chunk L2 has since evicted fails its fetch and is recomputed.
func (t *Tiered) isKnown(h blockhash.Hash) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.known.Contains(h)
}

func (t *Tiered) exists(h blockhash.Hash) (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), t.cfg.Timeout)
	defer cancel()
	ok, err := t.cfg.Remote.Exists(ctx, t.Key(h))
	if err != nil {
		t.failed("exists", err)
	}
	return ok, err
}

// FetchRemote implements engine.Fetcher: it GETs the chunks covering
// tokens[start:end] in order, stopping at the first miss, error or
// corrupt value, promotes what arrived into L1, and charges the longer of
// the measured time and the modelled network time of the full-size KV.
func (t *Tiered) FetchRemote(tokens []uint32, extra []string, start, end int) (int, float64) {
	cs := t.L1.cfg.ChunkSize
	hashes := t.hasher.Chain(tokens, cs, extra)
	first, last := start/cs, min((end+cs-1)/cs, len(hashes))
	began := time.Now()
	got := 0
	for _, h := range hashes[first:last] {
		if !t.get(h) {
			break
		}
		got++
	}
	wall := time.Since(began)
	if got == 0 {
		return start, 0
	}
	fetchedEnd := min((first+got)*cs, end)
	t.L1.mu.Lock()
	t.store(tokens[:(first+got)*cs], extra)
	t.L1.mu.Unlock()
	t.mu.Lock()
	for _, h := range hashes[first : first+got] {
		t.known.Add(h, struct{}{})
	}
	t.mu.Unlock()
	secs := max(wall.Seconds(), t.cfg.NetworkSeconds(fetchedEnd-start))
	return fetchedEnd, secs
}

// get fetches one chunk and checks it is the value written for h.
func (t *Tiered) get(h blockhash.Hash) bool {
	if !t.up() {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), t.cfg.Timeout)
	defer cancel()
	began := time.Now()
	v, err := t.cfg.Remote.Get(ctx, t.Key(h))
	switch {
	case errors.Is(err, ErrMiss):
		return false
	case err != nil:
		t.failed("get", err)
		return false
	}
	if o := t.observer(); o != nil {
		o.ObserveGet(time.Since(began), len(v))
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.counters.ReadRequests++
	t.counters.ReadBytes += int64(len(v))
	if !valid(v, h, t.valueBytes) {
		t.counters.Corrupt++
		t.cfg.Log.Warn("lmcache remote returned a corrupt chunk; treated as a miss", "key", t.Key(h), "bytes", len(v))
		return false
	}
	return true
}

// Store implements engine.Connector: L1 now, L2 behind. Chunks known to
// be in L2 already are not written again.
func (t *Tiered) Store(tokens []uint32, extra []string) {
	t.L1.Store(tokens, extra)
	hashes := t.hasher.Chain(tokens, t.L1.cfg.ChunkSize, extra)
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, h := range hashes {
		if t.known.Contains(h) {
			continue
		}
		select {
		case t.puts <- put{hash: h}:
			t.known.Add(h, struct{}{})
		default:
			t.counters.DroppedPuts++
		}
	}
}

func (t *Tiered) writer(ctx context.Context) {
	buf := make([]byte, t.valueBytes)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.done:
			return
		case p := <-t.puts:
			if !t.up() {
				t.forget(p.hash)
				continue
			}
			fill(buf, p.hash)
			cctx, cancel := context.WithTimeout(ctx, t.cfg.Timeout)
			began := time.Now()
			err := t.cfg.Remote.Put(cctx, t.Key(p.hash), buf)
			cancel()
			if err != nil {
				t.failed("put", err)
				t.forget(p.hash)
				continue
			}
			if o := t.observer(); o != nil {
				o.ObservePut(time.Since(began), len(buf))
			}
			t.mu.Lock()
			t.counters.WriteRequests++
			t.counters.WriteBytes += int64(len(buf))
			t.mu.Unlock()
		}
	}
}

// forget drops h from the known set, so a later store writes it again.
func (t *Tiered) forget(h blockhash.Hash) {
	t.mu.Lock()
	t.known.Remove(h)
	t.mu.Unlock()
}

// up reports whether the remote is outside its backoff.
func (t *Tiered) up() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return time.Now().After(t.downUntil)
}

// failed counts an error and skips the remote for the backoff, so a dead
// L2 costs one timeout per backoff period, not one per chunk.
func (t *Tiered) failed(op string, err error) {
	t.mu.Lock()
	t.counters.Errors++
	wasUp := time.Now().After(t.downUntil)
	t.downUntil = time.Now().Add(t.cfg.Backoff)
	t.mu.Unlock()
	if wasUp {
		t.cfg.Log.Warn("lmcache remote failed; treating it as empty for the backoff", "op", op, "err", err, "backoff", t.cfg.Backoff)
	}
}

// RemoteCounters returns cumulative L2 totals.
func (t *Tiered) RemoteCounters() RemoteCounters {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.counters
}

// fill writes the chunk's value: its hash repeated, so a reader can check
// every byte came back as written without keeping a copy.
func fill(buf []byte, h blockhash.Hash) {
	for i := 0; i < len(buf); {
		i += copy(buf[i:], h[:])
	}
}

// valid reports whether v is the value fill writes for h.
func valid(v []byte, h blockhash.Hash, size int) bool {
	if len(v) != size {
		return false
	}
	for i := 0; i < len(v); i += len(h) {
		n := min(len(h), len(v)-i)
		if !bytes.Equal(v[i:i+n], h[:n]) {
			return false
		}
	}
	return true
}
