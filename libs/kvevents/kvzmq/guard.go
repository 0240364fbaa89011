package kvzmq

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/warmpath/warmpath/libs/zmtpguard"
)

// The publisher's sockets accept connections from anyone who can reach
// them, and Replay dials whatever answers at a worker's address: all of
// them go through zmtpguard (default limits), so no peer can make zmq4
// allocate the frame size it announces. One scheme serves the package.
var guardScheme = sync.OnceValues(func() (string, error) {
	return zmtpguard.Register(zmtpguard.Limits{}, reportRejection)
})

// lastRejectionLog rate-limits reportRejection to one warning per
// rejectionLogEvery; a peer reconnecting in a loop must not flood the log.
var (
	lastRejectionLog   atomic.Int64
	unloggedRejections atomic.Uint64
)

const rejectionLogEvery = 10 * time.Second

func reportRejection(r zmtpguard.Rejection) {
	now, last := time.Now().UnixNano(), lastRejectionLog.Load()
	if now-last < int64(rejectionLogEvery) || !lastRejectionLog.CompareAndSwap(last, now) {
		unloggedRejections.Add(1)
		return
	}
	peer := ""
	if r.Peer != nil {
		peer = r.Peer.String()
	}
	slog.Default().Warn("kvzmq: dropped a peer's connection", "peer", peer, "err", r.Err,
		"alsoDroppedSinceLastWarning", unloggedRejections.Swap(0))
}

// guarded rewrites a tcp:// endpoint to the guarded transport; endpoints of
// other transports, or already guarded, are returned as they are.
func guarded(endpoint string) string {
	scheme, err := guardScheme()
	if err != nil {
		// Register fails only on a duplicate name, and it numbers its names.
		slog.Default().Error("kvzmq: no frame-size guard; peers can announce frames of any size", "err", err)
		return endpoint
	}
	return zmtpguard.Endpoint(scheme, endpoint)
}
