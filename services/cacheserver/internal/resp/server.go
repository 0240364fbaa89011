package resp

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/warmpath/warmpath/services/cacheserver/internal/connserve"
	"github.com/warmpath/warmpath/services/cacheserver/internal/metrics"
	"github.com/warmpath/warmpath/services/cacheserver/internal/store"
)

// Config tunes a Server.
type Config struct {
	Limits
	// Password, when set, must be given with AUTH before other commands;
	// until then PreAuthLimits apply.
	Password string
	// IdleTimeout closes a connection with no command for this long (10m).
	IdleTimeout time.Duration
	// IOTimeout bounds reading a command's rest once its first byte came,
	// running it (forwards included) and writing its reply (30s).
	IOTimeout time.Duration
	// Clustered says the keys New is given are the cluster's, which
	// forwards each key to its owners, as lm:// does, rather than the
	// node's own store. Expiry commands are then refused, since forwards
	// carry no expiry.
	Clustered bool
}

// Backend holds the keys: the node's store (cluster.Local) or the cluster.
type Backend interface {
	Get(ctx context.Context, key string) (*store.Object, bool)
	Put(ctx context.Context, key string, obj *store.Object) bool
	Contains(ctx context.Context, key string) bool
	Delete(ctx context.Context, key string) bool
}

// Expiry is the node's own store's clock and expiries: what EXPIRE,
// PEXPIRE, TTL, PTTL, PERSIST and SET's EX and PX act on.
type Expiry interface {
	// Now is the clock expiries are measured against.
	Now() time.Time
	// Expires returns key's expiry (Unix nanoseconds, 0: never); ok is
	// false when key is absent.
	Expires(key string) (at int64, ok bool)
	// SetExpires changes key's expiry (0: never; not after Now: delete)
	// and reports whether key was there.
	SetExpires(key string, at int64) bool
}

// Node is the node's own store as RESP reads it beside the keys: its
// expiries, and the counters INFO and DBSIZE report (the first tier's:
// memory). store.Memory and store.Tiered are both one.
type Node interface {
	Expiry
	Tiers() []store.TierStats
}

// Server serves RESP connections.
type Server struct {
	cfg     Config
	node    Node    // the node's own: expiry, INFO, DBSIZE
	keys    Backend // GET, SET, MGET, EXISTS, DEL
	metrics *metrics.Metrics
	log     *slog.Logger
	lastID  atomic.Int64 // connection ids, as HELLO reports them
}

// New returns a server of keys (the node's own store, or the cluster when
// cfg.Clustered) whose expiries and counters are node's.
func New(cfg Config, keys Backend, node Node, m *metrics.Metrics, log *slog.Logger) *Server {
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = 10 * time.Minute
	}
	if cfg.IOTimeout <= 0 {
		cfg.IOTimeout = 30 * time.Second
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Server{cfg: cfg, node: node, keys: keys, metrics: m, log: log}
}

// Serve accepts connections on ln until ctx ends, then closes them all. A
// connection whose handler panics is logged and closed; the others go on.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	return connserve.Serve(ctx, ln, s.log, func(c net.Conn) { s.serveConn(ctx, c) })
}

// session is one connection's state.
type session struct {
	s      *Server
	w      *bufio.Writer
	buf    []byte // reused for replies' encoding
	id     int64  // HELLO's id
	proto  int    // 2, or 3 after HELLO 3: how nulls and maps are encoded
	authed bool
	quit   bool
}

func (s *Server) serveConn(ctx context.Context, conn net.Conn) {
	defer conn.Close()
	dr := &connserve.DeadlineReader{Conn: conn, Idle: s.cfg.IdleTimeout, IO: s.cfg.IOTimeout}
	br := bufio.NewReaderSize(dr, 64<<10)
	ss := &session{s: s, w: bufio.NewWriterSize(conn, 64<<10), id: s.lastID.Add(1), proto: 2, authed: s.cfg.Password == ""}
	rd := NewReader(br, PreAuthLimits)
	limited := !ss.authed
	if !limited {
		rd.SetLimits(s.cfg.Limits)
	}
	for !ss.quit {
		if limited && ss.authed {
			rd.SetLimits(s.cfg.Limits)
			limited = false
		}
		dr.Begin(br.Buffered() == 0)
		args, err := rd.Next()
		if err != nil {
			if errors.Is(err, ErrProtocol) {
				s.metrics.Errors.WithLabelValues("resp", "malformed").Inc()
				msg := "ERR Protocol error: "
				if limited {
					msg += "unauthenticated client: " // as Redis words it
				}
				ss.err(msg + err.Error())
				_ = conn.SetWriteDeadline(time.Now().Add(s.cfg.IOTimeout))
				_ = ss.w.Flush()
			} else if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				s.metrics.Errors.WithLabelValues("resp", "io").Inc()
			}
			return
		}
		// Armed per command, not only before Flush: a reply larger than
		// the write buffer goes to the socket while it is being built.
		_ = conn.SetWriteDeadline(time.Now().Add(s.cfg.IOTimeout))
		ss.dispatch(ctx, args)
		// Pipelined commands are answered together.
		if br.Buffered() == 0 || ss.quit {
			if err := ss.w.Flush(); err != nil {
				s.metrics.Errors.WithLabelValues("resp", "io").Inc()
				return
			}
		}
	}
}

// dispatch runs one command through the table: lookup, auth, arity and
// metrics happen here, once, for every command.
func (ss *session) dispatch(ctx context.Context, args [][]byte) {
	s := ss.s
	cmd, ok := commands[strings.ToUpper(string(args[0]))]
	if !ok {
		// Unknown names are not a label value: clients choose them.
		s.metrics.Requests.WithLabelValues("resp", "unknown", "error").Inc()
		ss.err("ERR unknown command '" + truncate(string(args[0]), 64) + "'")
		return
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, s.cfg.IOTimeout)
	defer cancel()
	result := "error"
	switch {
	case !ss.authed && !cmd.noAuth:
		s.metrics.AuthFailures.WithLabelValues("resp").Inc()
		ss.err("NOAUTH Authentication required.")
	case !cmd.arityOK(len(args)):
		ss.err("ERR wrong number of arguments for '" + cmd.name + "' command")
	default:
		result = cmd.run(ss, ctx, args)
	}
	s.metrics.Requests.WithLabelValues("resp", cmd.op, result).Inc()
	s.metrics.Duration.WithLabelValues("resp", cmd.op).Observe(time.Since(start).Seconds())
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// Replies: encoded by the append* functions into the session's scratch
// buffer, then buffered for the connection.

func (ss *session) write(b []byte) {
	_, _ = ss.w.Write(b)
	ss.buf = b[:0]
}

func (ss *session) simple(s string) { ss.write(appendSimple(ss.buf[:0], s)) }
func (ss *session) err(s string)    { ss.write(appendError(ss.buf[:0], s)) }
func (ss *session) integer(n int)   { ss.write(appendInt(ss.buf[:0], int64(n))) }
func (ss *session) array(n int)     { ss.write(appendArray(ss.buf[:0], n)) }

// null writes the connection's protocol's null.
func (ss *session) null() {
	if ss.proto == 3 {
		ss.write(appendNull3(ss.buf[:0]))
		return
	}
	ss.write(appendNull(ss.buf[:0]))
}

// mapHeader writes a map of n pairs: a RESP3 map, or in RESP2 the flat
// array Redis sends in its place.
func (ss *session) mapHeader(n int) {
	if ss.proto == 3 {
		ss.write(appendMap(ss.buf[:0], n))
		return
	}
	ss.write(appendArray(ss.buf[:0], 2*n))
}

// bulk writes v after its header, straight from the caller's slice: a
// large value bypasses the buffer and is never copied.
func (ss *session) bulk(v []byte) {
	ss.write(appendBulkHeader(ss.buf[:0], len(v)))
	_, _ = ss.w.Write(v)
	_, _ = ss.w.WriteString("\r\n")
}
