package tokenizer

import (
	"context"
	"strings"

	"github.com/warmpath/warmpath/services/router/strategy"
)

// Pending is a long prompt's tokenization under way: its head is encoded,
// the whole is being encoded in the background.
type Pending struct {
	// Head are the ids of the prompt's first piece-cut prefix: the first
	// ids of the whole, since the pre-tokenizer ends a piece at the cut.
	Head []uint32
	// Estimate is the whole prompt's length in tokens, scaled from the
	// head's bytes per token.
	Estimate int

	done chan struct{}
	res  Result
	err  error
}

// Wait returns the whole prompt's tokenization, once it is done.
func (p *Pending) Wait() (Result, error) {
	<-p.done
	return p.res, p.err
}

// Start begins tokenizing req in the background and returns its head at
// once, when req is a completion prompt long enough to be encoded on
// several cores (parallelGrids cut grids) that the router has not encoded
// any prefix of: the case where the request would otherwise wait for the
// whole encoding. Otherwise it returns nil, and Tokenize is the way.
func (c *Client) Start(ctx context.Context, req *strategy.Request) *Pending {
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
	p := &Pending{
		Head:     head,
		Estimate: max(len(head), int(float64(len(head))*float64(len(req.Prompt))/float64(cuts[0])+0.5)),
		done:     make(chan struct{}),
	}
	// A copy of what tokenizing reads: the request's strings may live in
	// buffers the server reuses once the request is answered.
	whole := &strategy.Request{Model: strings.Clone(req.Model), Prompt: strings.Clone(req.Prompt)}
	go func() {
		defer close(p.done)
		p.res, p.err = c.Tokenize(ctx, "", whole)
	}()
	return p
}
