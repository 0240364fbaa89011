package tokenizer

import (
	"context"
	"strings"
	"sync"

	"github.com/warmpath/warmpath/services/router/strategy"
)

// Pending is a long prompt's tokenization under way: its head is encoded;
// the whole is encoded once asked for, by Wait (on every core: a request
// waits) or WaitBackground (on one: none does).
type Pending struct {
	// Head are the ids of the prompt's first piece-cut prefix: the first
	// ids of the whole, since the pre-tokenizer ends a piece at the cut.
	Head []uint32
	// Estimate is the whole prompt's length in tokens, scaled from the
	// head's bytes per token.
	Estimate int

	c     *Client
	whole *strategy.Request
	once  sync.Once
	res   Result
	err   error
}

// Wait returns the whole prompt's tokenization, encoding it first on
// every core unless that is done or under way: for a request that waits
// for it (a retry, a prompt some worker holds after all).
func (p *Pending) Wait() (Result, error) { return p.encode(false) }

// WaitBackground is Wait for work no request waits for (the predictions
// of a prompt already routed on its head): it encodes on one core, so the
// routing of the request it belongs to, and of others, keeps the rest.
// Encoding on every core from the moment the head was ready held a
// request's own routing up by about 3 ms on two cores
// (BenchmarkHeadRoutedDocument).
func (p *Pending) WaitBackground() (Result, error) { return p.encode(true) }

// encode encodes the whole once; later and concurrent callers wait for it.
// The whole is encoded in-process (Start gives no head for a model without
// a local vocabulary), so no worker is asked and no context bounds it.
func (p *Pending) encode(background bool) (Result, error) {
	p.once.Do(func() { p.res, p.err = p.c.tokenize(context.Background(), "", p.whole, background) })
	return p.res, p.err
}

// Start encodes req's head and returns it, leaving the whole to Pending's
// Wait or WaitBackground, when req is a completion prompt long enough to
// be encoded on several cores (parallelGrids cut grids) that the router
// has not encoded any prefix of: the case where the request would otherwise wait for the
// whole encoding. Otherwise it returns nil, and Tokenize is the way.
func (c *Client) Start(req *strategy.Request) *Pending {
	m := c.cfg.Local.model(req.Model)
	if m == nil || req.Messages != nil || len(req.Prompt) < parallelGrids*c.cutGrid {
		return nil
	}
	if _, ok := c.cache.get(cacheKey(req)); ok {
		return nil
	}
	cuts := pieceCuts(req.Prompt, c.cutGrid)
	if len(cuts) == 0 {
		return nil
	}
	for _, key := range completionKeys(req.Model, req.Prompt, cuts) {
		if c.cache.has(key) {
			return nil // a prefix was encoded before: Tokenize reuses it
		}
	}
	head, err := m.encode(req.Prompt[:cuts[0]])
	if err != nil || len(head) == 0 {
		return nil // Tokenize reports the error
	}
	// A copy of what tokenizing reads: the request's strings may live in
	// buffers the server reuses once the request is answered.
	return &Pending{
		Head:     head,
		Estimate: max(len(head), int(float64(len(head))*float64(len(req.Prompt))/float64(cuts[0])+0.5)),
		c:        c,
		whole:    &strategy.Request{Model: strings.Clone(req.Model), Prompt: strings.Clone(req.Prompt)},
	}
}
