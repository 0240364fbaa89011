package proxy

import (
	"errors"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/warmpath/warmpath/libs/openai"
	"github.com/warmpath/warmpath/services/router/internal/metrics"
	"github.com/warmpath/warmpath/services/router/internal/pool"
	"github.com/warmpath/warmpath/services/router/internal/tokenizer"
	"github.com/warmpath/warmpath/services/router/strategy"
)

// route sends the request to a worker and, while nothing has reached the
// client and the failure is one --retry-on names, to another, up to
// MaxRetries more. Every pass of the loop is an attempt: waiting for
// capacity and tokenizing happen in choose, which is not one.
func (s *Server) route(x *exchange) outcome {
	var last *attempt
	for {
		c, err := s.choose(x)
		if err != nil {
			return s.unrouted(x, last, err)
		}
		// A decision made on a long prompt's head is made whole once the
		// rest is encoded, while the worker already has the request.
		var whole <-chan strategy.Decision
		if x.late != nil {
			whole = s.completeLate(x, c.dec)
		}
		final := len(x.tries) >= s.cfg.MaxRetries
		x.span.SetAttributes(attribute.String("warmpath.strategy", x.strategy), attribute.String("warmpath.worker", c.ep.URL),
			attribute.Int("warmpath.match_chunks", c.dec.MatchedChunks), attribute.Int("warmpath.prompt_chunks", c.dec.TotalChunks),
			attribute.Int("warmpath.attempt", len(x.tries)))
		// What an operator checks routing by: where the request went and
		// which cache tier the strategy credited (a sample at INFO).
		s.logRouted(x, c)
		// forward returns once the first body byte is in (or the attempt
		// failed): the worker's prefill of this prompt is over either way.
		prefillDone := c.ep.StartPrefill(c.dec.PrefillTokens)
		last = s.forward(x, c.ep, c.release, final)
		prefillDone()
		if whole != nil {
			c.dec = <-whole
		}
		if po, ok := x.routing.Strategy.(strategy.PrefillObserver); ok && last.failure == "" && last.ok && len(c.dec.Keys) > 0 {
			po.Prefilled(c.ep.URL, c.dec.Keys)
		}
		x.tries = append(x.tries, last.try)
		x.excluded[c.ep.URL] = true
		if last.done {
			return last.outcome
		}
		if final || !s.cfg.RetryOn.Has(last.failure) {
			return s.fail(x, last)
		}
		s.metrics.Retries.WithLabelValues(retryReason(last.failure)).Inc()
		x.log().Warn("retrying on another worker", "worker", c.ep.URL, "failure", last.failure, "err", last.err)
	}
}

// choice is a worker chosen for an attempt, its slot held.
type choice struct {
	ep      *pool.Endpoint
	release func() // frees the worker slot; forward owns it
	dec     strategy.Decision
}

// errNoWorker: no worker serving the model is left to try.
var errNoWorker = errors.New("no worker left to try")

// choose picks the worker for the next attempt and holds a slot at it. It
// waits while every candidate is at MaxPerWorker, tokenizes once for a
// strategy that routes on token ids, and chooses again when the chosen
// worker left the pool or filled up meanwhile. Errors are the limiter's
// (the wait ended), errNoWorker, or a pickError.
func (s *Server) choose(x *exchange) (choice, error) {
	if x.excluded == nil {
		x.excluded = map[string]bool{}
	}
	if x.late != nil && len(x.tries) > 0 {
		// A retry: the first attempt's worker is excluded, and the choice
		// among the rest is made on the whole prompt.
		if res, err := x.late.Wait(); err == nil {
			x.parsed.route.TokenIDs, x.parsed.route.PromptTokens = res.IDs, 0
		}
		x.late = nil
	}
	for {
		// Taken before looking, so a slot freed while we look wakes us.
		var changed <-chan struct{}
		if s.cfg.MaxPerWorker > 0 {
			changed = s.limiter.Changed()
		}
		sel := s.selectable(x.parsed.model, x.excluded)
		if len(sel.eps) == 0 {
			if sel.full == 0 {
				return choice{}, errNoWorker
			}
			// Every usable worker is at its own limit: wait for a slot.
			if err := s.limiter.WaitForChange(x.ctx, changed); err != nil {
				return choice{}, err
			}
			continue
		}
		if x.cacheAware && !x.tokenized {
			x.tokenized = true
			if s.tokenize(x, sel.eps) {
				// Tokenizing took a round trip: look at the workers' load
				// again, or every request of a burst would see the loads
				// from before it.
				continue
			}
		}
		if sel.panic && len(x.tries) == 0 {
			s.metrics.PanicRouted.Inc()
			s.warnPanic(x.parsed.model)
		}
		dec, err := s.pick(x, sel.eps)
		if err != nil {
			return choice{}, pickError{err}
		}
		ep := s.pool.Get(dec.Endpoint)
		if ep == nil {
			// Removed since the snapshot (a scale-down): the pool's
			// OnRemove may have made the strategy forget the worker
			// before this pick taught it about it again, so forget it
			// once more, or the knowledge outlives the worker.
			if f, ok := x.routing.Strategy.(strategy.Forgetter); ok {
				f.Forget(dec.Endpoint)
			}
			x.excluded[dec.Endpoint] = true
			continue
		}
		release, ok := ep.TryAcquire(s.cfg.MaxPerWorker)
		if !ok {
			// Another request took the worker's last slot since the
			// snapshot: wait for a slot, then choose again.
			if err := s.limiter.WaitForChange(x.ctx, changed); err != nil {
				return choice{}, err
			}
			continue
		}
		return choice{ep: ep, release: release, dec: dec}, nil
	}
}

// pick asks the strategy (or, for requests that teach no cache, the least
// loaded) for one of eps.
func (s *Server) pick(x *exchange, eps []strategy.Endpoint) (strategy.Decision, error) {
	t0 := time.Now()
	defer func() { s.metrics.DecisionDuration.WithLabelValues(x.strategy).Observe(time.Since(t0).Seconds()) }()
	if !x.cacheAware {
		return strategy.LeastLoaded(eps), nil
	}
	dec, err := x.routing.Strategy.Pick(&x.parsed.route, eps)
	if err != nil {
		return dec, err
	}
	if dec.Strategy != "" {
		x.strategy = dec.Strategy
	}
	s.metrics.MatchRatio.WithLabelValues(x.strategy).Observe(dec.MatchRatio)
	if dec.Fallback != "" {
		// Labelled with the configured strategy: kvaware's no_tokens
		// decision was made by prefixaware.
		s.metrics.RoutingFallbacks.WithLabelValues(x.routing.Strategy.Name(), dec.Fallback).Inc()
	}
	for t, n := range dec.TierBlocks {
		if n > 0 {
			s.metrics.CreditedBlocks.WithLabelValues(x.strategy, tierName(t)).Add(float64(n))
		}
	}
	return dec, nil
}

// tierName labels Decision.TierBlocks[i].
func tierName(i int) string { return [...]string{"gpu", "cpu", "l2"}[i] }

// unrouted answers a request choose found no worker for: with the last
// attempt's failure when there was one.
func (s *Server) unrouted(x *exchange, last *attempt, err error) outcome {
	var pe pickError
	switch {
	case errors.Is(err, errNoWorker) && last != nil:
		return s.fail(x, last)
	case errors.Is(err, errNoWorker):
		return s.reject(x, metrics.ReasonNoWorker, openai.Errorf(http.StatusServiceUnavailable, "no healthy worker serves model %q", x.parsed.model))
	case errors.As(err, &pe):
		return s.reject(x, metrics.ReasonNoWorker, openai.Errorf(http.StatusServiceUnavailable, "routing: %v", pe.error))
	default: // the wait for a worker slot ended
		return s.overflow(x, err)
	}
}

// pickError is a strategy's refusal to choose.
type pickError struct{ error }

// selection is the workers a request may go to now.
type selection struct {
	eps []strategy.Endpoint
	// full counts workers that qualify but are at MaxPerWorker.
	full int
	// panic says too few of the model's workers are available, so all of
	// them are candidates, healthy or not.
	panic bool
}

// selectable lists the workers serving model, minus excluded. Normally
// those are the available ones (passing health checks, not ejected); when
// fewer than PanicPercent of the model's workers are available, the router
// panics as Envoy does and routes to every worker serving the model: a
// broken health signal (or a bad request that tripped ejection everywhere)
// must not turn into an outage while workers could still answer.
func (s *Server) selectable(model string, excluded map[string]bool) selection {
	serving, available, _ := s.census(model)
	sel := selection{panic: s.panics(serving, available)}
	for _, ep := range s.pool.All() {
		if excluded[ep.URL] || !ep.Serves(model) || !sel.panic && !ep.Available() {
			continue
		}
		inflight := ep.InFlight()
		if s.cfg.MaxPerWorker > 0 && inflight >= s.cfg.MaxPerWorker {
			sel.full++
			continue
		}
		st := ep.Stats()
		sel.eps = append(sel.eps, strategy.Endpoint{
			ID: ep.URL, InFlight: inflight, Running: st.Running, Waiting: st.Waiting, External: ep.External(),
			KVCacheUsage: st.KVCacheUsage, BlockSize: st.BlockSize, NumGPUBlocks: st.NumGPUBlocks,
			PendingPrefill: ep.PendingPrefill(),
		})
	}
	return sel
}

// census counts the workers serving model and, of those, the available
// ones (passing health checks, not ejected), and the available workers
// whose models are not fetched yet (which may serve it).
func (s *Server) census(model string) (serving, available, unknown int) {
	for _, ep := range s.pool.All() {
		if ep.Available() && ep.Models() == nil {
			unknown++
		}
		if ep.Serves(model) {
			serving++
			if ep.Available() {
				available++
			}
		}
	}
	return serving, available, unknown
}

// panics reports whether too few of a model's workers are available, so
// its requests go to all of them (PanicPercent).
func (s *Server) panics(serving, available int) bool {
	return s.cfg.PanicPercent > 0 && serving > 0 && available*100 < s.cfg.PanicPercent*serving
}

// tokenize fills the request's token ids for a strategy that routes on
// them, asking the least-loaded candidate. A failure leaves them empty:
// the strategy then routes without them, never failing the request.
// It reports whether it asked (the candidates' loads may have moved).
func (s *Server) tokenize(x *exchange, eps []strategy.Endpoint) bool {
	tu, ok := x.routing.Strategy.(strategy.TokenUser)
	if !ok || !tu.WantsTokens() || s.tok == nil || len(x.parsed.route.TokenIDs) > 0 {
		return false
	}
	if hr, ok := tu.(strategy.HeadRouter); ok {
		if ht, ok := s.tok.(HeadTokenizer); ok {
			if p := ht.Start(&x.parsed.route); p != nil {
				head := x.parsed.route
				head.TokenIDs, head.PromptTokens = p.Head, p.Estimate
				if hr.Cold(&head, eps) {
					s.metrics.Tokenize.WithLabelValues(metrics.TokenizeHead).Inc()
					x.parsed.route = head
					x.late = p
					return true
				}
				res, err := p.Wait()
				s.noteTokenized(x, res, err)
				return true
			}
		}
	}
	res, err := s.tok.Tokenize(x.ctx, strategy.LeastLoaded(eps).Endpoint, &x.parsed.route)
	s.noteTokenized(x, res, err)
	return !res.Cached
}

// completeLate waits, off the request's path, for the rest of a prompt
// routed on its head (x.late) and hands the whole to the strategy, which
// returns d as if made on it; d unchanged if encoding failed.
func (*Server) completeLate(x *exchange, d strategy.Decision) <-chan strategy.Decision {
	hr, _ := x.routing.Strategy.(strategy.HeadRouter)
	p, req, estimate := x.late, x.parsed.route, x.parsed.route.PromptTokens
	out := make(chan strategy.Decision, 1)
	go func() {
		res, err := p.WaitBackground()
		switch {
		case err != nil || hr == nil:
			// The request is counted once, as "head"; its decision stays
			// the head's (tokenize_total's "error" means routed without
			// token ids, which this one was not).
			out <- d
		default:
			req.TokenIDs, req.PromptTokens = res.IDs, 0
			out <- hr.Completed(&req, d, estimate)
		}
	}()
	return out
}

// noteTokenized counts and logs a tokenization and gives the request its
// ids (none when it failed: the strategy routes without them).
func (s *Server) noteTokenized(x *exchange, res tokenizer.Result, err error) {
	switch {
	case err != nil:
		s.metrics.Tokenize.WithLabelValues("error").Inc()
		x.log().Warn("tokenize failed; routing without token ids", "err", err)
	case res.Cached:
		s.metrics.Tokenize.WithLabelValues("cached").Inc()
	default:
		s.metrics.Tokenize.WithLabelValues("tokenized").Inc()
	}
	switch {
	case res.LocalErr != nil:
		s.metrics.TokenizeLocalChat.WithLabelValues(metrics.LocalChatFallback).Inc()
		x.log().Debug("in-process chat tokenization failed; asked the worker", "err", res.LocalErr)
	case res.LocalChat && res.ReusedTokens > 0:
		s.metrics.TokenizeLocalChat.WithLabelValues(metrics.LocalChatReused).Inc()
		s.metrics.TokenizeReusedTokens.Add(float64(res.ReusedTokens))
	case res.LocalChat:
		s.metrics.TokenizeLocalChat.WithLabelValues(metrics.LocalChatRendered).Inc()
	case res.ReusedTokens > 0: // a completion's prefix, encoded before
		s.metrics.TokenizeReusedTokens.Add(float64(res.ReusedTokens))
	}
	x.parsed.route.TokenIDs = res.IDs
}

// fail answers after an attempt failed before any byte reached the client
// and no other may follow: 503 when no worker could even be reached (as
// Envoy answers a connect failure, so clients retry later), else 502.
func (s *Server) fail(x *exchange, res *attempt) outcome {
	status := http.StatusBadGateway
	if res.failure == FailConnect {
		status = http.StatusServiceUnavailable
	}
	x.log().Warn("request failed", "worker", res.ep.URL, "status", status, "failure", res.failure, "err", res.err, "attempts", len(x.tries))
	writeFastError(x.fc, openai.Errorf(status, "worker %s: %v", res.ep.URL, res.err))
	return outcome{status: status, worker: res.ep.URL}
}

// retryReason is the retries_total label of a failure.
func retryReason(f Failure) string {
	switch f {
	case FailConnect:
		return metrics.ReasonConnectError
	case FailRefused:
		return metrics.ReasonRefused
	case FailReset:
		return metrics.ReasonUpstreamReset
	case FailTimeout:
		return metrics.ReasonUpstreamTimeout
	default:
		return metrics.ReasonUpstream5xx
	}
}

// panicWarnEvery is the least time between two panic-routing warnings:
// in panic every request is panic-routed, and one line says it.
const panicWarnEvery = 10 * time.Second

// warnPanic logs that requests are being panic-routed, at most once per
// panicWarnEvery.
func (s *Server) warnPanic(model string) {
	now := time.Now().UnixNano()
	last := s.panicWarnAt.Load()
	if now-last < int64(panicWarnEvery) || !s.panicWarnAt.CompareAndSwap(last, now) {
		return
	}
	s.log.Warn("panic routing: too few of the model's workers are healthy; routing to all of them",
		"model", model, "threshold_percent", s.cfg.PanicPercent)
}
