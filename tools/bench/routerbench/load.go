package routerbench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// doneTail is how a well-formed OpenAI stream ends.
var doneTail = []byte("data: [DONE]\n\n")

// copyBufs holds the 32 KiB buffers response bodies are read into.
var copyBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// Target is one endpoint the load generator drives: the upstreams directly,
// nginx or the router. Each Target has its own keep-alive connection pool,
// so targets never share or steal connections. A Target is safe for
// concurrent use.
type Target struct {
	// Name is "direct", "nginx" or "router".
	Name string
	// urls are the completion endpoints; request i goes to urls[i mod len],
	// which spreads "direct" requests over several upstreams.
	urls   []string
	client *http.Client
}

// NewTarget returns a target posting to <base>/v1/completions for each
// base URL, keeping up to maxConns idle connections per host, with timeout
// bounding each whole request.
func NewTarget(name string, maxConns int, timeout time.Duration, bases ...string) *Target {
	t := &Target{Name: name}
	for _, b := range bases {
		t.urls = append(t.urls, b+"/v1/completions")
	}
	t.client = &http.Client{Timeout: timeout, Transport: &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: maxConns,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		// Headers and the 8 KB body leave in one write.
		WriteBufferSize: 16 << 10,
		ReadBufferSize:  16 << 10,
	}}
	return t
}

// Close drops the target's idle connections.
func (t *Target) Close() { t.client.CloseIdleConnections() }

// sample is one successful request: time to the first body byte and to the
// end of the body, both from just before the request is sent.
type sample struct{ ttfb, total time.Duration }

// do sends body as request number i and reads the whole response.
func (t *Target) do(ctx context.Context, i int, body []byte, stream bool) (sample, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.urls[i%len(t.urls)], bytes.NewReader(body))
	if err != nil {
		return sample{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := t.client.Do(req)
	if err != nil {
		return sample{}, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
		return sample{}, fmt.Errorf("status %d: %s", resp.StatusCode, bytes.TrimSpace(msg))
	}
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	buf := *bp
	var s sample
	var tail [len("data: [DONE]\n\n")]byte
	size := 0
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if size == 0 {
				s.ttfb = time.Since(start)
			}
			size += n
			keepTail(tail[:], buf[:n])
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return sample{}, fmt.Errorf("read body: %w", err)
		}
	}
	s.total = time.Since(start)
	switch {
	case size == 0:
		return sample{}, errors.New("empty response body")
	case stream && (size < len(tail) || !bytes.Equal(tail[:], doneTail)):
		return sample{}, errors.New("stream did not end with data: [DONE]")
	}
	return s, nil
}

// keepTail shifts chunk into tail, a window over the last len(tail) bytes
// read so far.
func keepTail(tail, chunk []byte) {
	if len(chunk) >= len(tail) {
		copy(tail, chunk[len(chunk)-len(tail):])
		return
	}
	copy(tail, tail[len(chunk):])
	copy(tail[len(tail)-len(chunk):], chunk)
}

// recorder collects one load goroutine's samples; it is not shared.
type recorder struct {
	total, ttfb []time.Duration
	errors      int
	firstErr    error
}

func (r *recorder) add(s sample, err error) {
	if err != nil {
		r.fail(err)
		return
	}
	r.total = append(r.total, s.total)
	r.ttfb = append(r.ttfb, s.ttfb)
}

func (r *recorder) fail(err error) {
	r.errors++
	if r.firstErr == nil {
		r.firstErr = err
	}
}

// Step is the outcome of driving one target at one concurrency.
type Step struct {
	Target      string `json:"target"`
	Stream      bool   `json:"stream"`
	Concurrency int    `json:"concurrency"`
	// Requests counts successful requests measured; Errors counts failed
	// ones, warm-up included.
	Requests   int    `json:"requests"`
	Errors     int    `json:"errors"`
	FirstError string `json:"first_error,omitempty"`
	// Seconds is the measured wall time; RPS is Requests/Seconds.
	Seconds float64 `json:"seconds"`
	RPS     float64 `json:"rps"`
	// Latency is time to the last response byte; TTFB, for streams only,
	// time to the first body byte (the first event).
	Latency Summary  `json:"latency"`
	TTFB    *Summary `json:"ttfb,omitempty"`
}

// load describes one step of load on one target.
type load struct {
	target      *Target
	bodies      [][]byte
	stream      bool
	concurrency int
}

// outcome is the merged raw result of one or more runs of a load.
type outcome struct {
	total, ttfb []time.Duration
	errors      int
	firstErr    error
	elapsed     time.Duration
}

// add merges o2 into o, elapsed times adding up.
func (o *outcome) add(o2 outcome) {
	o.total = append(o.total, o2.total...)
	o.ttfb = append(o.ttfb, o2.ttfb...)
	o.errors += o2.errors
	if o.firstErr == nil {
		o.firstErr = o2.firstErr
	}
	o.elapsed += o2.elapsed
}

// step summarizes o as the Step of l. It sorts o's samples.
func (o outcome) step(l load) Step {
	st := Step{
		Target: l.target.Name, Stream: l.stream, Concurrency: l.concurrency,
		Requests: len(o.total), Errors: o.errors, Seconds: round3(o.elapsed.Seconds()),
		Latency: Summarize(o.total),
	}
	if o.firstErr != nil {
		st.FirstError = o.firstErr.Error()
	}
	if o.elapsed > 0 {
		st.RPS = round1(float64(len(o.total)) / o.elapsed.Seconds())
	}
	if l.stream {
		s := Summarize(o.ttfb)
		st.TTFB = &s
	}
	return st
}

// runCount sends exactly n requests from l.concurrency goroutines, each
// starting its next request when its previous one ends.
func runCount(ctx context.Context, l load, n int) outcome {
	var next atomic.Int64
	start := time.Now()
	o := l.spawn(func(r *recorder) {
		for ctx.Err() == nil {
			i := int(next.Add(1) - 1)
			if i >= n {
				return
			}
			s, err := l.target.do(ctx, i, l.bodies[i%len(l.bodies)], l.stream)
			r.add(s, err)
		}
	})
	o.elapsed = time.Since(start)
	return o
}

// runFor runs a closed loop at l.concurrency for warm+d and keeps the
// requests that end within the last d; errors count throughout.
func runFor(ctx context.Context, l load, warm, d time.Duration) outcome {
	var next atomic.Int64
	from := time.Now().Add(warm)
	until := from.Add(d)
	o := l.spawn(func(r *recorder) {
		for ctx.Err() == nil && time.Now().Before(until) {
			i := int(next.Add(1) - 1)
			s, err := l.target.do(ctx, i, l.bodies[i%len(l.bodies)], l.stream)
			if end := time.Now(); err == nil && (end.Before(from) || end.After(until)) {
				continue
			}
			r.add(s, err)
		}
	})
	o.elapsed = d
	return o
}

// spawn runs body in l.concurrency goroutines, each with its own recorder,
// and merges the recorders once all have returned. A panic is recorded as
// an error of that goroutine.
func (l load) spawn(body func(*recorder)) outcome {
	recs := make([]recorder, l.concurrency)
	var wg sync.WaitGroup
	for k := range recs {
		wg.Go(func() {
			defer func() {
				if p := recover(); p != nil {
					recs[k].fail(fmt.Errorf("load goroutine panic: %v", p))
				}
			}()
			body(&recs[k])
		})
	}
	wg.Wait()
	var o outcome
	for _, r := range recs {
		o.add(outcome{total: r.total, ttfb: r.ttfb, errors: r.errors, firstErr: r.firstErr})
	}
	return o
}

func round3(v float64) float64 { return math.Round(v*1000) / 1000 }
