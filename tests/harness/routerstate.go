package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// RouterEndpoint is one worker in the router's GET /debug/endpoints: what
// the suites read there of the router's insides.
type RouterEndpoint struct {
	URL          string     `json:"url"`
	Healthy      bool       `json:"healthy"`
	EjectedUntil *time.Time `json:"ejectedUntil"`
	InFlight     int        `json:"inFlight"`
	// PeerInFlight is the other router replicas' requests at the worker,
	// as they last reported them (--peers); External is the load beside
	// the router's own that its strategy counts.
	PeerInFlight int      `json:"peerInFlight"`
	External     int      `json:"external"`
	Models       []string `json:"models"`
	NumGPUBlocks int      `json:"numGpuBlocks"`
	// KV is the kvaware index's blocks of the worker and its KV-event
	// stream, when the router subscribes to its events (zero otherwise).
	KV struct {
		Blocks map[string]int `json:"blocks"` // per tier: gpu, cpu, l2
		Events struct {
			Connected bool   `json:"connected"`
			Batches   uint64 `json:"batches"`
			Gaps      uint64 `json:"gaps"`
			Replays   uint64 `json:"replays"`
			Lost      uint64 `json:"lostBatches"`
			Restarts  uint64 `json:"restarts"`
		} `json:"events"`
	} `json:"kv"`
}

// InRotation says the router would route to the worker: healthy and not
// ejected.
func (e RouterEndpoint) InRotation() bool {
	return e.Healthy && (e.EjectedUntil == nil || !e.EjectedUntil.After(time.Now()))
}

// RouterEndpoints GETs base's /debug/endpoints with c (a client trusting
// the router's certificate, if it serves TLS).
func RouterEndpoints(ctx context.Context, c *http.Client, base string) ([]RouterEndpoint, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/debug/endpoints", nil)
	if err != nil {
		return nil, fmt.Errorf("harness: %w", err)
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("harness: /debug/endpoints: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("%s: %s", resp.Status, b)
	}
	if err != nil {
		return nil, fmt.Errorf("harness: /debug/endpoints: %w", err)
	}
	var v struct {
		Endpoints []RouterEndpoint `json:"endpoints"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, fmt.Errorf("harness: /debug/endpoints: %w", err)
	}
	return v.Endpoints, nil
}
