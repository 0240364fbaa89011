// Package lmserver serves LMCache's lm:// protocol (libs/lmproto) over the
// cache server's store: what LMCache workers configured with
// LMCACHE_REMOTE_URL=lm://host:port talk to.
package lmserver

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"time"

	"github.com/warmpath/warmpath/libs/lmproto"
	"github.com/warmpath/warmpath/services/cacheserver/internal/connserve"
	"github.com/warmpath/warmpath/services/cacheserver/internal/metrics"
	"github.com/warmpath/warmpath/services/cacheserver/internal/store"
)

// Config tunes a Server.
type Config struct {
	// MaxValueBytes bounds a PUT (a larger one closes the connection).
	MaxValueBytes int
	// IdleTimeout closes a connection with no request for this long (10m):
	// LMCache keeps one connection per worker open, mostly idle.
	IdleTimeout time.Duration
	// IOTimeout bounds reading a request's rest once its header began, and
	// writing a reply (30s).
	IOTimeout time.Duration
	// Reserve, when set, is asked for room for a PUT's value as its buffer
	// grows with the bytes that arrive (the memory tier: values being
	// received count against its capacity); the room is given back once
	// the value is stored or dropped.
	Reserve Reserver
}

// Reserver admits a PUT's value by its first step (Reserve, which may wait
// for room) and grows it by the next ones (Grow, which does not: the
// value's own earlier steps are what it would wait for).
type Reserver interface {
	Reserve(ctx context.Context, n int64) (release func(), err error)
	Grow(n int64) (release func())
}

// Backend is where requests go: the local store, or the cluster that
// forwards to each key's owner.
type Backend interface {
	Get(ctx context.Context, key string) (*store.Object, bool)
	Put(ctx context.Context, key string, obj *store.Object) bool
	Contains(ctx context.Context, key string) bool
	Delete(ctx context.Context, key string) bool
}

// Server serves lm:// connections.
type Server struct {
	cfg     Config
	mem     Backend
	metrics *metrics.Metrics
	log     *slog.Logger
}

// New returns a server over mem.
func New(cfg Config, mem Backend, m *metrics.Metrics, log *slog.Logger) *Server {
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = 10 * time.Minute
	}
	if cfg.IOTimeout <= 0 {
		cfg.IOTimeout = 30 * time.Second
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Server{cfg: cfg, mem: mem, metrics: m, log: log}
}

// Serve accepts connections on ln until ctx ends, then closes them all.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	return connserve.Serve(ctx, ln, s.log, s.serveConn)
}

func (s *Server) serveConn(conn net.Conn) {
	defer conn.Close()
	// Every request on the connection gets this context; in cluster mode
	// a forward to a peer derives its deadline from it.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dr := &connserve.DeadlineReader{Conn: conn, Idle: s.cfg.IdleTimeout, IO: s.cfg.IOTimeout}
	br := bufio.NewReaderSize(dr, 64<<10)
	rd := lmproto.NewReader(br, s.cfg.MaxValueBytes)
	// A PUT's value is reserved step by step as its buffer grows with the
	// bytes that arrive; every step is given back once it is stored or
	// dropped.
	var releases []func()
	release := func() {
		for _, r := range releases {
			r()
		}
		releases = releases[:0]
	}
	defer release()
	if s.cfg.Reserve != nil {
		rd.SetReserve(func(n int) error {
			if len(releases) > 0 {
				releases = append(releases, s.cfg.Reserve.Grow(int64(n)))
				return nil
			}
			// Room is waited for no longer than a request may take: a
			// client that holds its reservation by sending slowly delays
			// other PUTs by at most that (its whole request is bounded by
			// the I/O timeout), then they fail (and close) rather than
			// queue forever.
			rctx, cancel := context.WithTimeout(ctx, s.cfg.IOTimeout)
			defer cancel()
			r, err := s.cfg.Reserve.Reserve(rctx, int64(n))
			if err != nil {
				return err
			}
			releases = append(releases, r)
			return nil
		})
	}
	var reply []byte
	for {
		dr.Begin(br.Buffered() == 0)
		req, err := rd.Next()
		if err != nil {
			if errors.Is(err, lmproto.ErrProtocol) {
				s.metrics.Errors.WithLabelValues("lm", "malformed").Inc()
				s.log.Warn("lm: closing connection after a protocol error", "remote", conn.RemoteAddr().String(), "err", err)
			} else if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				s.metrics.Errors.WithLabelValues("lm", "io").Inc()
			}
			return
		}
		start := time.Now()
		op, result := "", "ok"
		reply = reply[:0]
		var value []byte
		switch req.Command {
		case lmproto.CmdPut:
			op = "put"
			s.mem.Put(ctx, req.Key, &store.Object{Value: req.Value, Meta: req.Meta})
			release() // stored (and counted as such) or dropped
			s.metrics.BytesIn.WithLabelValues("lm").Add(float64(len(req.Value)))
		case lmproto.CmdGet:
			op = "get"
			if obj, ok := s.mem.Get(ctx, req.Key); ok {
				meta := obj.Meta
				meta.Length = int32(len(obj.Value))
				reply = lmproto.AppendReply(reply, &lmproto.ReplyHeader{Code: lmproto.CodeSuccess, Meta: meta})
				value, result = obj.Value, "hit"
			} else {
				reply = lmproto.AppendReply(reply, &lmproto.ReplyHeader{Code: lmproto.CodeFail})
				result = "miss"
			}
		case lmproto.CmdExist:
			op = "exist"
			code := lmproto.CodeFail
			result = "miss"
			if s.mem.Contains(ctx, req.Key) {
				code, result = lmproto.CodeSuccess, "hit"
			}
			reply = lmproto.AppendReply(reply, &lmproto.ReplyHeader{Code: code})
		case lmproto.CmdDelete:
			op = "delete"
			code := lmproto.CodeFail
			result = "miss"
			if s.mem.Delete(context.Background(), req.Key) {
				code, result = lmproto.CodeSuccess, "hit"
			}
			reply = lmproto.AppendReply(reply, &lmproto.ReplyHeader{Code: code})
		case lmproto.CmdHealth:
			op = "health"
			reply = lmproto.AppendReply(reply, &lmproto.ReplyHeader{Code: lmproto.CodeSuccess})
		}
		if len(reply) > 0 {
			_ = conn.SetWriteDeadline(time.Now().Add(s.cfg.IOTimeout))
			// The header goes in one write (the client reads it with a
			// single recv); the value, unchanged, straight from the store.
			bufs := net.Buffers{reply}
			if len(value) > 0 {
				bufs = append(bufs, value)
			}
			if _, err := bufs.WriteTo(conn); err != nil {
				s.metrics.Errors.WithLabelValues("lm", "io").Inc()
				return
			}
			s.metrics.BytesOut.WithLabelValues("lm").Add(float64(len(value)))
		}
		s.metrics.Requests.WithLabelValues("lm", op, result).Inc()
		s.metrics.Duration.WithLabelValues("lm", op).Observe(time.Since(start).Seconds())
	}
}
