// Package discovery finds the router's workers: a static list, the A/AAAA
// records of a headless Service's DNS name, or Kubernetes EndpointSlices
// selected by label. Every source reports the complete current set on each
// change; the router diffs it against its live endpoint registry.
package discovery

import "context"

// Target is one discovered worker.
type Target struct {
	// URL is the worker's base URL, e.g. http://10.0.0.7:8000. It is the
	// worker's identity in the router.
	URL string
	// Name is a human label (pod name, hostname); may be empty.
	Name string
}

// Source produces the worker set. Run calls update with the complete set
// whenever it may have changed (at least once, after the first successful
// lookup) until ctx ends. update must not block for long.
type Source interface {
	Run(ctx context.Context, update func([]Target)) error
}
