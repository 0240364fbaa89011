package cluster

import (
	"context"

	"github.com/warmpath/warmpath/libs/lmproto"
)

// Delete implements the lm:// server's backend.
func (l Local) Delete(_ context.Context, key string) bool { return l.Mem.Delete(key) }

// Delete removes key from every owner, and from this node too (a copy
// left from before a membership change must not answer a later read), and
// reports whether any held it. A peer that fails keeps its copy (counted).
func (c *Cluster) Delete(ctx context.Context, key string) bool {
	deleted := c.local.Delete(key)
	for _, o := range c.Owners(key) {
		if o == c.cfg.Self {
			continue
		}
		var ok bool
		err := c.pool(o).with(ctx, func(cl *lmproto.Client) error {
			var err error
			ok, err = cl.Delete(ctx, key)
			return err
		})
		switch {
		case err != nil:
			c.forwarded.WithLabelValues("delete", "error").Inc()
		case ok:
			c.forwarded.WithLabelValues("delete", "hit").Inc()
			deleted = true
		default:
			c.forwarded.WithLabelValues("delete", "miss").Inc()
		}
	}
	return deleted
}
