// Package routerbench measures what the warmpath router adds to a request
// and how much traffic it sustains, against nginx proxying the same fast
// upstream in the same run, and against a plain Go
// net/http/httputil.ReverseProxy (the stdlib target: the floor any
// net/http-based Go proxy starts from).
//
// A run starts in-process fake vLLM workers ([Upstream]) that answer
// /v1/completions in microseconds, an nginx master process ([Nginx]), the
// stdlib proxy ([Stdlib], tools/cmd/bench-stdproxy) and the router ([Router])
// in front of them, and drives every target with the same keep-alive load
// generator: a fixed request count at fixed concurrency for latency
// percentiles, then a closed loop at rising concurrency for maximum
// throughput. Targets take turns within each step, so machine noise hits them
// alike; the report states absolute figures, the router-to-nginx ratios the
// router issue sets as goals (added p99 within 2× nginx's, max RPS at least
// half of nginx's) and the router-to-stdlib ratios. See docs/benchmarks.md.
package routerbench
