package resp

import (
	"bufio"
	"bytes"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/warmpath/warmpath/services/cacheserver/internal/connserve"
	"github.com/warmpath/warmpath/services/cacheserver/internal/metrics"
	"github.com/warmpath/warmpath/services/cacheserver/internal/store"
)

// Config tunes a Server.
type Config struct {
	Limits
	// Password, when set, must be given with AUTH before other commands.
	Password string
	// IdleTimeout closes a connection with no command for this long (10m).
	IdleTimeout time.Duration
	// IOTimeout bounds reading a command's rest once its first byte came,
	// and writing its reply (30s).
	IOTimeout time.Duration
}

// Server serves RESP connections.
type Server struct {
	cfg     Config
	mem     store.Store
	metrics *metrics.Metrics
	log     *slog.Logger
}

// New returns a server over mem.
func New(cfg Config, mem store.Store, m *metrics.Metrics, log *slog.Logger) *Server {
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

// deadlineReader arms the idle timeout before a command's first byte and
// the I/O timeout for the rest, so a client may idle between commands
// (LMCache keeps one connection open) but not trickle one in forever.
type deadlineReader struct {
	conn       net.Conn
	idle, io   time.Duration
	atBoundary bool
}

func (d *deadlineReader) Read(p []byte) (int, error) {
	t := d.io
	if d.atBoundary {
		t = d.idle
		d.atBoundary = false
	}
	_ = d.conn.SetReadDeadline(time.Now().Add(t))
	return d.conn.Read(p)
}

// session is one connection's state.
type session struct {
	s      *Server
	w      *bufio.Writer
	authed bool
	quit   bool
}

func (s *Server) serveConn(conn net.Conn) {
	defer conn.Close()
	dr := &deadlineReader{conn: conn, idle: s.cfg.IdleTimeout, io: s.cfg.IOTimeout}
	br := bufio.NewReaderSize(dr, 64<<10)
	ss := &session{s: s, w: bufio.NewWriterSize(conn, 64<<10), authed: s.cfg.Password == ""}
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
		dr.atBoundary = br.Buffered() == 0
		args, err := rd.Next()
		if err != nil {
			if errors.Is(err, ErrProtocol) {
				s.metrics.Errors.WithLabelValues("resp", "malformed").Inc()
				msg := "-ERR Protocol error: "
				if limited {
					msg += "unauthenticated client: " // as Redis words it
				}
				_, _ = ss.w.WriteString(msg + sanitize(err.Error()) + "\r\n")
				_ = ss.w.Flush()
			} else if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				s.metrics.Errors.WithLabelValues("resp", "io").Inc()
			}
			return
		}
		// Armed per command, not only before Flush: a reply larger than
		// the write buffer goes to the socket while it is being built.
		_ = conn.SetWriteDeadline(time.Now().Add(s.cfg.IOTimeout))
		ss.handle(args)
		// Pipelined commands are answered together.
		if br.Buffered() == 0 || ss.quit {
			if err := ss.w.Flush(); err != nil {
				s.metrics.Errors.WithLabelValues("resp", "io").Inc()
				return
			}
		}
	}
}

func sanitize(s string) string { return strings.NewReplacer("\r", " ", "\n", " ").Replace(s) }

func (ss *session) simple(s string) { _, _ = ss.w.WriteString("+" + s + "\r\n") }
func (ss *session) err(s string)    { _, _ = ss.w.WriteString("-" + sanitize(s) + "\r\n") }
func (ss *session) integer(n int)   { _, _ = ss.w.WriteString(":" + strconv.Itoa(n) + "\r\n") }
func (ss *session) null()           { _, _ = ss.w.WriteString("$-1\r\n") }
func (ss *session) array(n int)     { _, _ = ss.w.WriteString("*" + strconv.Itoa(n) + "\r\n") }
func (ss *session) bulk(b []byte) {
	_, _ = ss.w.WriteString("$" + strconv.Itoa(len(b)) + "\r\n")
	_, _ = ss.w.Write(b) // large values bypass the buffer: no copy
	_, _ = ss.w.WriteString("\r\n")
}

// handle runs one command.
func (ss *session) handle(args [][]byte) {
	s := ss.s
	start := time.Now()
	name := strings.ToUpper(string(args[0]))
	op, result := strings.ToLower(name), "ok"
	defer func() {
		if op != "" {
			s.metrics.Requests.WithLabelValues("resp", op, result).Inc()
			s.metrics.Duration.WithLabelValues("resp", op).Observe(time.Since(start).Seconds())
		}
	}()
	wrongArity := func() {
		ss.err(fmt.Sprintf("ERR wrong number of arguments for '%s' command", strings.ToLower(name)))
		result = "error"
	}
	arity := func(least int) bool {
		if len(args) < least {
			wrongArity()
			return false
		}
		return true
	}
	if !ss.authed && name != "AUTH" && name != "HELLO" && name != "QUIT" {
		s.metrics.AuthFailures.WithLabelValues("resp").Inc()
		ss.err("NOAUTH Authentication required.")
		result = "error"
		return
	}
	switch name {
	case "GET":
		if !arity(2) {
			return
		}
		if obj, ok := s.mem.Get(string(args[1])); ok {
			ss.bulk(obj.Value)
			s.metrics.BytesOut.WithLabelValues("resp").Add(float64(len(obj.Value)))
			result = "hit"
		} else {
			ss.null()
			result = "miss"
		}
	case "SET":
		if !arity(3) {
			return
		}
		if len(args[1]) > store.MaxKeyBytes {
			ss.err(fmt.Sprintf("ERR key of %d bytes exceeds the limit of %d", len(args[1]), store.MaxKeyBytes))
			result = "error"
			return
		}
		expires, err := setExpiry(args[3:], s.mem.Now().UnixNano())
		if err != nil {
			ss.err(err.Error())
			result = "error"
			return
		}
		if !s.mem.Put(string(args[1]), &store.Object{Value: args[2], Expires: expires}) {
			ss.err("ERR value larger than a memory shard")
			result = "error"
			return
		}
		s.metrics.BytesIn.WithLabelValues("resp").Add(float64(len(args[2])))
		ss.simple("OK")
	case "MGET":
		if !arity(2) {
			return
		}
		ss.array(len(args) - 1)
		for _, k := range args[1:] {
			if obj, ok := s.mem.Get(string(k)); ok {
				ss.bulk(obj.Value)
				s.metrics.BytesOut.WithLabelValues("resp").Add(float64(len(obj.Value)))
			} else {
				ss.null()
			}
		}
	case "EXISTS":
		if !arity(2) {
			return
		}
		n := 0
		for _, k := range args[1:] {
			if s.mem.Contains(string(k)) {
				n++
			}
		}
		ss.integer(n)
	case "DEL", "UNLINK":
		if !arity(2) {
			return
		}
		op = "delete"
		n := 0
		for _, k := range args[1:] {
			if s.mem.Delete(string(k)) {
				n++
			}
		}
		ss.integer(n)
	case "EXPIRE", "PEXPIRE", "TTL", "PTTL", "PERSIST":
		want := 2
		if name == "EXPIRE" || name == "PEXPIRE" {
			want = 3
		}
		if len(args) > want && want == 3 {
			ss.err("ERR " + name + " options (NX, XX, GT, LT) are not supported")
			result = "error"
			return
		}
		if len(args) != want {
			wrongArity()
			return
		}
		result = ss.expireCommand(name, args)
	case "PING":
		if len(args) > 1 {
			ss.bulk(args[1])
		} else {
			ss.simple("PONG")
		}
	case "ECHO":
		if arity(2) {
			ss.bulk(args[1])
		}
	case "AUTH":
		if !arity(2) {
			return
		}
		pass := args[len(args)-1] // AUTH [user] password
		switch {
		case s.cfg.Password == "":
			ss.err("ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?")
			result = "error"
		case subtle.ConstantTimeCompare(pass, []byte(s.cfg.Password)) == 1:
			ss.authed = true
			ss.simple("OK")
		default:
			s.metrics.AuthFailures.WithLabelValues("resp").Inc()
			ss.err("WRONGPASS invalid username-password pair or user is disabled.")
			result = "error"
		}
	case "HELLO":
		// Clients then stay on RESP2.
		ss.err("ERR unknown command 'HELLO'")
		result = "error"
	case "SELECT":
		if !arity(2) {
			return
		}
		if string(args[1]) != "0" {
			ss.err("ERR DB index is out of range")
			result = "error"
			return
		}
		ss.simple("OK")
	case "CLIENT":
		ss.simple("OK") // SETINFO, SETNAME: accepted and ignored
	case "COMMAND":
		ss.array(0)
	case "CONFIG":
		// redis-benchmark asks for save and appendonly on start.
		if len(args) >= 3 && strings.EqualFold(string(args[1]), "GET") {
			key := strings.ToLower(string(args[2]))
			val := map[string]string{"save": "", "appendonly": "no"}[key]
			if key == "save" || key == "appendonly" {
				ss.array(2)
				ss.bulk([]byte(key))
				ss.bulk([]byte(val))
				return
			}
		}
		ss.array(0)
	case "INFO":
		st := s.mem.Tiers()[0].Stats
		var b bytes.Buffer
		fmt.Fprintf(&b, "# Server\r\nredis_version:7.0.0\r\nwarmpath_cacheserver:1\r\n# Memory\r\nused_memory:%d\r\nmaxmemory:%d\r\n# Keyspace\r\ndb0:keys=%d,expires=0,avg_ttl=0\r\n", st.Bytes, st.Capacity, st.Objects)
		ss.bulk(b.Bytes())
	case "DBSIZE":
		ss.integer(int(s.mem.Tiers()[0].Objects))
	case "QUIT":
		ss.simple("OK")
		ss.quit = true
	default:
		op = "" // unknown names are not a label value
		s.metrics.Requests.WithLabelValues("resp", "unknown", "error").Inc()
		ss.err(fmt.Sprintf("ERR unknown command '%.64s'", sanitize(string(args[0]))))
	}
}
