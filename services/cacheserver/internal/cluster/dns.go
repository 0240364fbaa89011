package cluster

import (
	"context"
	"log/slog"
	"net"
	"slices"
	"time"
)

// WatchDNS keeps the membership equal to the addresses of name (a headless
// Service), each with port, until ctx ends. A failed lookup keeps the last
// membership.
func WatchDNS(ctx context.Context, c *Cluster, name, port string, every time.Duration, log *slog.Logger) {
	var r net.Resolver
	for {
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		addrs, err := r.LookupHost(lctx, name)
		cancel()
		if err != nil {
			log.Warn("cluster: peer lookup failed; keeping the last membership", "name", name, "err", err)
		} else {
			peers := make([]string, 0, len(addrs))
			for _, a := range addrs {
				peers = append(peers, net.JoinHostPort(a, port))
			}
			slices.Sort(peers)
			if !slices.Equal(peers, withoutSelf(c.Peers(), c.cfg.Self)) {
				c.SetPeers(peers)
				log.Info("cluster: membership changed", "peers", peers)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
	}
}

func withoutSelf(peers []string, self string) []string {
	return slices.DeleteFunc(slices.Clone(peers), func(p string) bool { return p == self })
}
