package proxy

import (
	"fmt"
	"slices"
	"strings"
)

// Failure is how one attempt at a worker failed, which decides whether the
// request may go to another worker. The names are the values of
// --retry-on.
type Failure string

// The failures an attempt can end in, from safest to retry to least safe.
const (
	// FailConnect: the worker could not be reached, or the connection
	// broke before the whole request was written. The worker never had
	// the whole request, so it cannot have run it.
	FailConnect Failure = "connect-failure"
	// FailRefused: the worker answered 429, or 503 with Retry-After: it
	// refused the request without running it.
	FailRefused Failure = "refused"
	// FailReset: the connection closed or reset after the whole request
	// was sent and before the response began. The worker may have run
	// the request, or been killed by it: re-sending a request that crashes
	// workers spreads the crash through the fleet.
	FailReset Failure = "reset"
	// Fail5xx: the worker answered 5xx (other than a refusal).
	Fail5xx Failure = "5xx"
	// FailTimeout: the worker sent no response body byte within
	// TTFBTimeout. It has the request and may still be computing it, so
	// re-sending doubles the work when it is merely slow; but a hung
	// worker (frozen, wedged GPU) would otherwise fail every request sent
	// to it until probes take it out of the rotation. Envoy retries its
	// per-try timeouts the same way only when asked.
	FailTimeout Failure = "timeout"
)

// DefaultRetryOn retries only what is known not to have run on the worker,
// as Envoy's connect-failure and refused-stream do; reset and 5xx are
// opt-in, since an inference request is not idempotent in cost.
var DefaultRetryOn = RetryOn{FailConnect, FailRefused}

// RetryOn is the set of failures retried on another worker.
type RetryOn []Failure

// ParseRetryOn reads a comma-separated --retry-on value; "none" (or empty)
// retries nothing.
func ParseRetryOn(s string) (RetryOn, error) {
	out := RetryOn{}
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		switch Failure(f) {
		case "", "none":
		case FailConnect, FailRefused, FailReset, Fail5xx, FailTimeout:
			if !slices.Contains(out, Failure(f)) {
				out = append(out, Failure(f))
			}
		default:
			return nil, fmt.Errorf("retry-on: unknown failure %q (connect-failure, refused, reset, 5xx, timeout, none)", f)
		}
	}
	return out, nil
}

// Has reports whether f is retried.
func (r RetryOn) Has(f Failure) bool { return slices.Contains(r, f) }

// String is the --retry-on form.
func (r RetryOn) String() string {
	if len(r) == 0 {
		return "none"
	}
	s := make([]string, len(r))
	for i, f := range r {
		s[i] = string(f)
	}
	return strings.Join(s, ",")
}

// statusFailure classifies a worker's answer: "" for one that is not a
// failure (below 500 and not a refusal).
func statusFailure(status int, retryAfter string) Failure {
	switch {
	case status == 429, status == 503 && retryAfter != "":
		return FailRefused
	case status >= 500:
		return Fail5xx
	}
	return ""
}
