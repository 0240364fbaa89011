package routerbench

import "context"

// Fleet is n fake workers serving on loopback ports in this process, for
// benchmarks that drive the router in front of many of them.
type Fleet struct{ u *upstreams }

// StartFleet serves n fake workers of model, each streaming chunks events.
func StartFleet(ctx context.Context, n int, model string, chunks int) (*Fleet, error) {
	u, err := startUpstreams(ctx, n, model, chunks)
	if err != nil {
		return nil, err
	}
	return &Fleet{u: u}, nil
}

// URLs are the workers' base URLs, http://127.0.0.1:<port>.
func (f *Fleet) URLs() []string { return f.u.urls }

// Close stops every worker.
func (f *Fleet) Close() { f.u.close() }

// Drive sends exactly n non-streamed requests of bodies through t from
// concurrency goroutines, each starting its next request when its previous
// one ends, and summarises them.
func Drive(ctx context.Context, t *Target, bodies [][]byte, concurrency, n int) Step {
	l := load{target: t, bodies: bodies, concurrency: concurrency}
	return runCount(ctx, l, n).step(l)
}
