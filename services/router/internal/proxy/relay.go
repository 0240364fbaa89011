package proxy

import (
	"net"
	"net/http"

	"github.com/warmpath/warmpath/services/router/internal/metrics"
	"github.com/warmpath/warmpath/services/router/internal/pool"
	"github.com/warmpath/warmpath/services/router/peer"
	"github.com/warmpath/warmpath/services/router/strategy"
)

// Peers are the router replicas that share this endpoint (package peers):
// a request another replica owns is relayed to it, so that one replica
// learns from, and routes, every request of a prompt family.
type Peers interface {
	// Owner is the base URL of the replica that owns key, and whether it
	// is this one.
	Owner(key uint64) (url string, self bool)
	// IsPeer says whether ip is a replica's address.
	IsPeer(ip net.IP) bool
}

// forwardedHeader marks a request one replica relayed to another: the
// owner routes it itself, never relays it again, and, when it comes from
// a peer's address, does not count it against its own limit, because the
// replica that received it holds the slot for it.
const forwardedHeader = "X-Warmpath-Forwarded-By"

// peerLabel is the strategy label of requests relayed to their owner:
// the owner counts them under the strategy that routed them.
const peerLabel = "peer"

// fromPeer says whether x was relayed by a replica of the set (only then
// is the slot the relaying replica holds trusted).
func (s *Server) fromPeer(x *exchange) bool {
	return s.cfg.Peers != nil && len(x.fc.Request.Header.Peek(forwardedHeader)) > 0 && s.cfg.Peers.IsPeer(x.fc.RemoteIP())
}

// relayToOwner sends x to the replica that owns its prompt when that is
// another one, and answers the client with what the owner answers. It
// returns false when x is this replica's to route: it owns it, it was
// relayed here already, or the owner could not be reached before it
// had the request (then this replica routes it, as a lone router would).
func (s *Server) relayToOwner(x *exchange) (outcome, bool) {
	if s.cfg.Peers == nil || !x.cacheAware {
		return outcome{}, false
	}
	if len(x.fc.Request.Header.Peek(forwardedHeader)) > 0 {
		// Routed here whoever sent it: a marked request never travels
		// twice, so replicas that disagree on the set cannot loop.
		x.header.Del(forwardedHeader)
		return outcome{}, false
	}
	if x.routing.Strategy.Name() == strategy.NameRoundRobin {
		// Round robin learns nothing from where a request went:
		// relaying it would add a hop and gain nothing.
		return outcome{}, false
	}
	owner, self := s.cfg.Peers.Owner(peer.RequestKey(&x.parsed.route))
	if self {
		s.metrics.PeerRelays.WithLabelValues(metrics.RelayOwn).Inc()
		return outcome{}, false
	}
	h, label := x.header, x.strategy
	x.header = h.Clone()
	x.header.Set(forwardedHeader, s.cfg.PeerSelf)
	x.strategy = peerLabel
	a := s.forward(x, pool.NewEndpoint(owner, ""), func() {}, true)
	x.header = h
	if !a.done {
		x.strategy = label
		// The owner is down or restarting: nothing reached the client.
		s.metrics.PeerRelays.WithLabelValues(metrics.RelayFailed).Inc()
		x.log().Warn("owner replica unreachable; routing here", "peer", owner, "failure", a.failure, "err", a.err)
		return outcome{}, false
	}
	// The owner's answer is this exchange's one attempt: an answer
	// streamed through settles it when the stream closes, after this
	// returns.
	x.tries = append(x.tries, a.try)
	s.metrics.PeerRelays.WithLabelValues(metrics.RelayForwarded).Inc()
	if a.outcome.status >= http.StatusInternalServerError {
		x.log().Warn("owner replica answered an error", "peer", owner, "status", a.outcome.status)
	}
	return a.outcome, true
}
