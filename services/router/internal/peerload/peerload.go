// Package peerload lets the router replicas of one endpoint see each
// other's load at every worker as it is, not as the last scrape left it.
//
// With relaying (package peers), each replica routes only the prompt
// families it owns, and learns of the others' requests at a worker from
// that worker's vllm:num_requests_running and _waiting, scraped once a
// second. Between scrapes a replica holds the others' load constant while
// they keep sending, and its load guard weighs workers on a picture up to
// a second old: in the des benchmark that alone cost prefixaware 4 points
// of hit rate at 3 replicas. Scraping every worker ten times a second
// from every replica would put the cost on the GPU workers' Python
// servers; instead each replica answers GET /peers/load with its own
// in-flight requests per worker, a few bytes, and reads the others' every
// --peer-load-interval (100 ms). What neither accounts for (other
// clients, requests in transit) still comes from the scrape
// (pool.Stats.Unexplained).
//
// Failure model: a peer that does not answer within the interval, or
// answers garbage, keeps its last report until that is older than three
// intervals, then counts for nothing (the scrape then sees its requests
// as unexplained load, as without peer load sharing). A report is bounded
// in size and in the workers it names; a worker this replica does not
// know is ignored. Only the replicas of the set may read a report.
package peerload

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/warmpath/warmpath/libs/openai"
	"github.com/warmpath/warmpath/services/router/internal/pool"
)

// Path is where a replica serves its report.
const Path = "/peers/load"

// maxReportBytes bounds a report read from a peer: a worker URL and a
// count are well under 200 bytes, so this allows tens of thousands of
// workers.
const maxReportBytes = 4 << 20

// Report is a replica's requests in flight at each worker, by worker URL
// as discovery names it (the same on every replica).
type Report struct {
	InFlight map[string]int `json:"inFlight"`
}

// Decode reads a report a peer sent, refusing more than maxReportBytes,
// trailing data and negative counts.
func Decode(r io.Reader) (Report, error) {
	var rep Report
	dec := json.NewDecoder(io.LimitReader(r, maxReportBytes+1))
	if err := dec.Decode(&rep); err != nil {
		return Report{}, fmt.Errorf("decode peer load report: %w", err)
	}
	if dec.More() {
		return Report{}, errors.New("decode peer load report: data after the report")
	}
	if dec.InputOffset() > maxReportBytes {
		return Report{}, fmt.Errorf("decode peer load report: over %d bytes", maxReportBytes)
	}
	for w, n := range rep.InFlight {
		if n < 0 {
			return Report{}, fmt.Errorf("decode peer load report: worker %q: negative count %d", w, n)
		}
	}
	return rep, nil
}

// Pool is the workers this replica routes to.
type Pool interface {
	All() []*pool.Endpoint
}

// Peers is the replica set (package peers).
type Peers interface {
	// Others returns the other replicas' base URLs.
	Others() []string
	// IsPeer says whether ip is a replica's address.
	IsPeer(ip net.IP) bool
}

// Counter counts polls by result ("ok", "failed").
type Counter interface {
	Inc(result string)
}

// Config configures a Sharer.
type Config struct {
	// Interval is how often the peers are read (100 ms when zero); each
	// read must answer within it.
	Interval time.Duration
	// Client makes the reads (a plain http.Client when nil).
	Client *http.Client
	// Polls counts them (none when nil).
	Polls Counter
	// Log receives a line when a peer's reports stop and when they
	// resume (discarded when nil).
	Log *slog.Logger
}

// Sharer serves this replica's report and keeps every worker's
// pool.Endpoint.PeerInFlight at the sum of the other replicas' fresh
// reports. Use New.
type Sharer struct {
	cfg   Config
	pool  Pool
	peers Peers

	mu      sync.Mutex
	reports map[string]peerReport // by peer base URL
}

type peerReport struct {
	at       time.Time // when it was read; zero: never
	inFlight map[string]int
	failing  bool // the last read failed (logged once per outage)
}

// New returns a Sharer for the workers in p and the replicas in peers.
func New(cfg Config, p Pool, peers Peers) *Sharer {
	if cfg.Interval <= 0 {
		cfg.Interval = 100 * time.Millisecond
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Sharer{cfg: cfg, pool: p, peers: peers, reports: map[string]peerReport{}}
}

// ServeHTTP answers a peer with this replica's report. Anyone else gets
// 403: which workers exist and how busy they are is the fleet's business.
func (s *Sharer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil || !s.peers.IsPeer(net.ParseIP(host)) {
		openai.WriteError(w, openai.Errorf(http.StatusForbidden, "%s answers only the router replicas of this endpoint", Path))
		return
	}
	eps := s.pool.All()
	rep := Report{InFlight: make(map[string]int, len(eps))}
	for _, ep := range eps {
		if n := ep.InFlight(); n > 0 {
			rep.InFlight[ep.URL] = n
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(rep)
}

// Run reads the peers every interval until ctx ends.
func (s *Sharer) Run(ctx context.Context) {
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		s.Poll(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Poll reads every other replica once, concurrently, and applies what it
// knows to the workers.
func (s *Sharer) Poll(ctx context.Context) {
	others := s.peers.Others()
	var wg sync.WaitGroup
	for _, p := range others {
		wg.Go(func() { s.read(ctx, p) })
	}
	wg.Wait()
	s.apply(time.Now(), others)
}

func (s *Sharer) read(ctx context.Context, peer string) {
	rctx, cancel := context.WithTimeout(ctx, s.cfg.Interval)
	defer cancel()
	rep, err := s.fetch(rctx, peer)
	s.mu.Lock()
	defer s.mu.Unlock()
	prev := s.reports[peer]
	if err != nil {
		if ctx.Err() != nil {
			return // shutting down
		}
		s.count("failed")
		if !prev.failing {
			s.cfg.Log.Warn("peer load unavailable; its requests count as load once a scrape sees them", "peer", peer, "err", err)
		}
		prev.failing = true
		s.reports[peer] = prev
		return
	}
	s.count("ok")
	if prev.failing {
		s.cfg.Log.Info("peer load resumed", "peer", peer)
	}
	s.reports[peer] = peerReport{at: time.Now(), inFlight: rep.InFlight}
}

func (s *Sharer) fetch(ctx context.Context, peer string) (Report, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, peer+Path, http.NoBody)
	if err != nil {
		return Report{}, fmt.Errorf("peer load request: %w", err)
	}
	resp, err := s.cfg.Client.Do(req)
	if err != nil {
		return Report{}, fmt.Errorf("read peer load: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		return Report{}, fmt.Errorf("read peer load: status %d", resp.StatusCode)
	}
	return Decode(resp.Body)
}

func (s *Sharer) count(result string) {
	if s.cfg.Polls != nil {
		s.cfg.Polls.Inc(result)
	}
}

// apply sets each worker's PeerInFlight to the sum over the current
// peers' reports no older than three intervals, and forgets replicas no
// longer in the set.
func (s *Sharer) apply(now time.Time, others []string) {
	current := make(map[string]bool, len(others))
	for _, p := range others {
		current[p] = true
	}
	sum := map[string]int{}
	s.mu.Lock()
	for p, r := range s.reports {
		if !current[p] {
			delete(s.reports, p)
			continue
		}
		if r.at.IsZero() || now.Sub(r.at) > 3*s.cfg.Interval {
			continue
		}
		for w, n := range r.inFlight {
			sum[w] += n
		}
	}
	s.mu.Unlock()
	for _, ep := range s.pool.All() {
		ep.SetPeerInFlight(sum[ep.URL])
	}
}
