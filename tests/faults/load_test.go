package faults

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// Causes of a request's failure, as recorded in faults.json.
const (
	causeHTTP      = "http_"          // + status: the router answered an error
	causeConnect   = "connect"        // the router could not be reached
	causeBroken    = "broken"         // the connection broke mid-answer
	causeTruncated = "stream_no_done" // a stream ended without [DONE] or an error event
	causeErrEvent  = "stream_error"   // a stream ended with an error event
	causeHung      = "hung"           // no end within requestBound
)

// requestBound is the longest a request may take before the client gives
// up and counts it hung; far above any answer or timeout the stack has.
const requestBound = 30 * time.Second

// result is one request of the load.
type result struct {
	stream     bool
	start, end time.Time
	status     int
	cause      string // "" when it succeeded
	detail     string
}

func (r result) ok() bool { return r.cause == "" }

// load sends requests open-loop, rate per second for dur, alternating
// non-streamed and streamed, each bounded by requestBound, and returns
// every result once all have ended.
func load(ctx context.Context, s *stack, rate float64, dur time.Duration) []result {
	var (
		mu  sync.Mutex
		out []result
		wg  sync.WaitGroup
	)
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	defer hc.CloseIdleConnections()
	tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer tick.Stop()
	end := time.Now().Add(dur)
	for i := 0; time.Now().Before(end); i++ {
		wg.Go(func() {
			stream := i%2 == 1
			maxTokens := 16
			if stream {
				maxTokens = 200
			}
			r := send(ctx, hc, s.url(), i, stream, maxTokens)
			mu.Lock()
			out = append(out, r)
			mu.Unlock()
		})
		select {
		case <-ctx.Done():
			end = time.Time{}
		case <-tick.C:
		}
	}
	wg.Wait()
	return out
}

// send sends request i, for maxTokens: a prompt of a few hundred tokens whose first half
// one of eight families shares, so the KV-aware router has prefixes to
// follow; streams ask for more tokens, so some are in flight at a fault.
func send(ctx context.Context, hc *http.Client, base string, i int, stream bool, maxTokens int) (r result) {
	r = result{stream: stream, start: time.Now()}
	defer func() { r.end = time.Now() }()
	prompt := fmt.Sprintf("%s Request %d asks about fault %d and its recovery.",
		strings.Repeat(fmt.Sprintf("Family %d shares this context about routers and caches. ", i%8), 30), i, i)
	body, _ := json.Marshal(map[string]any{
		"model": model, "prompt": prompt, "max_tokens": maxTokens, "temperature": 0, "stream": stream,
	})
	ctx, cancel := context.WithTimeout(ctx, requestBound)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/completions", bytes.NewReader(body))
	if err != nil {
		r.cause, r.detail = causeConnect, err.Error()
		return r
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	switch {
	case err != nil && ctx.Err() != nil:
		r.cause, r.detail = causeHung, err.Error()
		return r
	case err != nil:
		r.cause, r.detail = causeConnect, err.Error()
		return r
	}
	defer resp.Body.Close()
	r.status = resp.StatusCode
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		r.cause, r.detail = fmt.Sprintf("%s%d", causeHTTP, resp.StatusCode), string(b)
		return r
	}
	if !stream {
		b, err := io.ReadAll(resp.Body)
		switch {
		case err != nil && ctx.Err() != nil:
			r.cause, r.detail = causeHung, err.Error()
		case err != nil:
			r.cause, r.detail = causeBroken, err.Error()
		case !bytes.Contains(b, []byte(`"usage"`)):
			r.cause, r.detail = causeBroken, "no usage in "+string(b)
		}
		return r
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	done, errEvent := false, false
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		switch {
		case !ok:
		case data == "[DONE]":
			done = true
		case strings.HasPrefix(data, `{"error"`):
			errEvent = true
		}
	}
	switch err := sc.Err(); {
	case err != nil && ctx.Err() != nil:
		r.cause, r.detail = causeHung, err.Error()
	case errEvent:
		r.cause = causeErrEvent
	case err != nil && !errors.Is(err, io.EOF):
		r.cause, r.detail = causeBroken, err.Error()
	case !done:
		r.cause = causeTruncated
	}
	return r
}

// counts summarises results for faults.json.
type counts struct {
	Sent              int            `json:"sent"`
	Succeeded         int            `json:"succeeded"`
	Failed            map[string]int `json:"failed_by_cause"`
	NonStreamed       int            `json:"non_streamed"`
	NonStreamedFailed int            `json:"non_streamed_failed"`
	Streams           int            `json:"streams"`
	StreamsCompleted  int            `json:"streams_completed"`
	// StreamsEndedEarly ended before [DONE] but ended: an error event, a
	// broken connection or a body cut short.
	StreamsEndedEarly int `json:"streams_ended_early"`
	StreamsHung       int `json:"streams_hung"`
	// LongestStreamSeconds is the slowest stream's whole duration.
	LongestStreamSeconds float64 `json:"longest_stream_seconds"`
	// InFlightAtFault counts the requests started before the fault and
	// ended after it, by kind.
	InFlightAtFault map[string]int `json:"in_flight_at_fault"`
}

// summarise counts rs; fault is when the fault was injected.
func summarise(rs []result, fault time.Time) counts {
	c := counts{Failed: map[string]int{}, InFlightAtFault: map[string]int{}}
	for _, r := range rs {
		if r.start.Before(fault) && r.end.After(fault) {
			kind := "non_streamed"
			if r.stream {
				kind = "streamed"
			}
			c.InFlightAtFault[kind]++
		}
		c.Sent++
		if r.ok() {
			c.Succeeded++
		} else {
			c.Failed[r.cause]++
		}
		if !r.stream {
			c.NonStreamed++
			if !r.ok() {
				c.NonStreamedFailed++
			}
			continue
		}
		c.Streams++
		switch {
		case r.ok():
			c.StreamsCompleted++
		case r.cause == causeHung:
			c.StreamsHung++
		case r.status == http.StatusOK:
			c.StreamsEndedEarly++
		}
		c.LongestStreamSeconds = max(c.LongestStreamSeconds, round(r.end.Sub(r.start).Seconds()))
	}
	return c
}

// logFailures logs every failed request, at most 20.
func logFailures(t *testing.T, t0 time.Time, rs []result) {
	t.Helper()
	n := 0
	for _, r := range rs {
		if r.ok() {
			continue
		}
		if n++; n > 20 {
			t.Logf("... more failures")
			return
		}
		t.Logf("failed: stream=%v start=+%.2fs end=+%.2fs cause=%s %s", r.stream,
			r.start.Sub(t0).Seconds(), r.end.Sub(t0).Seconds(), r.cause, strings.TrimSpace(r.detail))
	}
}

func round(f float64) float64 { return float64(int(f*100+0.5)) / 100 }

// checkSent fails the test when load sent well under rate × dur requests:
// a run that barely loaded the stack proves little about the fault.
func checkSent(t *testing.T, sent int, rate float64, dur time.Duration) {
	t.Helper()
	if sent < int(rate*dur.Seconds())*3/4 {
		t.Errorf("sent %d requests, want about %v", sent, rate*dur.Seconds())
	}
}

// checkStreams asserts that every stream ended within a bound: completed,
// or cut short after its first byte with an error event (the status was
// sent, so the router can only end it), never failed before its first
// byte, which the router retries, and never hung.
func checkStreams(t *testing.T, t0 time.Time, rs []result, c counts) {
	t.Helper()
	if c.StreamsHung != 0 {
		t.Errorf("%d streams hung past %v", c.StreamsHung, requestBound)
	}
	// A stream whose worker went silent ends within the idle timeout of
	// its last event; a generous margin for a loaded machine.
	if bound := (idleTimeout + 15*time.Second).Seconds(); c.LongestStreamSeconds > bound {
		t.Errorf("longest stream took %.1fs, want it ended within %.0fs", c.LongestStreamSeconds, bound)
	}
	for _, r := range rs {
		switch {
		case !r.stream || r.ok() || r.cause == causeHung:
		case r.status != http.StatusOK:
			t.Errorf("stream at +%.2fs failed before its first byte (%s %s): the router retries those",
				r.start.Sub(t0).Seconds(), r.cause, r.detail)
		case r.cause != causeErrEvent:
			// Cut short after its status: the client must be told with an
			// error event, as vLLM tells of a stream that failed.
			t.Errorf("stream at +%.2fs ended early without an error event (%s %s)",
				r.start.Sub(t0).Seconds(), r.cause, r.detail)
		}
	}
}
