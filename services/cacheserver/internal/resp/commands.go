package resp

import (
	"bytes"
	"context"
	"crypto/subtle"
	"fmt"
	"strconv"
	"strings"

	"github.com/warmpath/warmpath/services/cacheserver/internal/store"
)

// command is one entry of the command table.
type command struct {
	name string // lower case, as in Redis's arity error
	// arity follows Redis: n means exactly n arguments, the name
	// included; -n at least n.
	arity int
	// op is the metrics label (the name unless set).
	op string
	// noAuth lets the command run before AUTH.
	noAuth bool
	// run executes a command whose auth and arity were checked, writes
	// its reply and returns the request's result label.
	run func(ss *session, ctx context.Context, args [][]byte) string
}

func (c *command) arityOK(n int) bool {
	if c.arity < 0 {
		return n >= -c.arity
	}
	return n == c.arity
}

// commands is the command table, by upper-case name.
var commands = map[string]*command{}

func init() {
	for name, c := range map[string]command{
		"GET":     {arity: 2, run: (*session).get},
		"SET":     {arity: -3, run: (*session).set},
		"MGET":    {arity: -2, run: (*session).mget},
		"MSET":    {arity: -3, run: (*session).mset},
		"EXISTS":  {arity: -2, run: (*session).exists},
		"DEL":     {arity: -2, op: "delete", run: (*session).del},
		"UNLINK":  {arity: -2, op: "delete", run: (*session).del},
		"EXPIRE":  {arity: -3, run: expiry("EXPIRE")},
		"PEXPIRE": {arity: -3, run: expiry("PEXPIRE")},
		"TTL":     {arity: 2, run: expiry("TTL")},
		"PTTL":    {arity: 2, run: expiry("PTTL")},
		"PERSIST": {arity: 2, run: expiry("PERSIST")},
		"PING":    {arity: -1, run: (*session).ping},
		"ECHO":    {arity: 2, run: (*session).echo},
		"AUTH":    {arity: -2, noAuth: true, run: (*session).auth},
		"HELLO":   {arity: -1, noAuth: true, run: (*session).hello},
		"SELECT":  {arity: 2, run: (*session).selectDB},
		"CLIENT":  {arity: -2, run: (*session).client},
		"COMMAND": {arity: -1, run: (*session).command},
		"CONFIG":  {arity: -2, run: (*session).config},
		"INFO":    {arity: -1, run: (*session).info},
		"DBSIZE":  {arity: 1, run: (*session).dbsize},
		"QUIT":    {arity: -1, noAuth: true, run: (*session).quitConn},
	} {
		c.name = strings.ToLower(name)
		if c.op == "" {
			c.op = c.name
		}
		commands[name] = &c
	}
}

// errClusterExpiry refuses expiries in cluster mode: a forwarded PUT
// (lm://) carries none, so the owner would keep the key past it.
const errClusterExpiry = "ERR expiry is not supported in cluster mode (forwards carry none; --ttl applies to every key)"

func (ss *session) get(ctx context.Context, args [][]byte) string {
	obj, ok := ss.s.keys.Get(ctx, string(args[1]))
	if !ok {
		ss.null()
		return "miss"
	}
	ss.bulk(obj.Value)
	ss.s.metrics.BytesOut.WithLabelValues("resp").Add(float64(len(obj.Value)))
	return "hit"
}

func (ss *session) set(ctx context.Context, args [][]byte) string {
	s := ss.s
	if len(args[1]) > store.MaxKeyBytes {
		ss.err(fmt.Sprintf("ERR key of %d bytes exceeds the limit of %d", len(args[1]), store.MaxKeyBytes))
		return "error"
	}
	if s.cfg.Clustered && len(args) > 3 {
		ss.err(errClusterExpiry)
		return "error"
	}
	expires, err := setExpiry(args[3:], s.node.Now().UnixNano())
	if err != nil {
		ss.err(err.Error())
		return "error"
	}
	if !s.keys.Put(ctx, string(args[1]), &store.Object{Value: args[2], Expires: expires}) {
		if s.cfg.Clustered {
			ss.err("ERR value not stored: larger than a memory shard, or no owner reachable")
		} else {
			ss.err("ERR value larger than a memory shard")
		}
		return "error"
	}
	s.metrics.BytesIn.WithLabelValues("resp").Add(float64(len(args[2])))
	ss.simple("OK")
	return "ok"
}

func (ss *session) mget(ctx context.Context, args [][]byte) string {
	ss.array(len(args) - 1)
	for _, k := range args[1:] {
		ss.get(ctx, [][]byte{nil, k})
	}
	return "ok"
}

// mset stores each key-value pair through the same backend as SET (the
// cluster in cluster mode). Unlike Redis's it is not atomic: a pair that
// cannot be stored ends it with an error, the pairs before it stored.
func (ss *session) mset(ctx context.Context, args [][]byte) string {
	s := ss.s
	if len(args)%2 != 1 {
		ss.err("ERR wrong number of arguments for 'mset' command")
		return "error"
	}
	for i := 1; i < len(args); i += 2 {
		if len(args[i]) > store.MaxKeyBytes {
			ss.err(fmt.Sprintf("ERR key of %d bytes exceeds the limit of %d", len(args[i]), store.MaxKeyBytes))
			return "error"
		}
	}
	for i := 1; i < len(args); i += 2 {
		if !s.keys.Put(ctx, string(args[i]), &store.Object{Value: args[i+1]}) {
			ss.err(fmt.Sprintf("ERR value of key %d of %d not stored: larger than a memory shard, or no owner reachable", i/2+1, len(args)/2))
			return "error"
		}
		s.metrics.BytesIn.WithLabelValues("resp").Add(float64(len(args[i+1])))
	}
	ss.simple("OK")
	return "ok"
}

func (ss *session) exists(ctx context.Context, args [][]byte) string {
	n := 0
	for _, k := range args[1:] {
		if ss.s.keys.Contains(ctx, string(k)) {
			n++
		}
	}
	ss.integer(n)
	return "ok"
}

func (ss *session) del(ctx context.Context, args [][]byte) string {
	n := 0
	for _, k := range args[1:] {
		if ss.s.keys.Delete(ctx, string(k)) {
			n++
		}
	}
	ss.integer(n)
	return "ok"
}

// expiry runs one of EXPIRE, PEXPIRE, TTL, PTTL, PERSIST on the node's
// own store.
func expiry(name string) func(*session, context.Context, [][]byte) string {
	return func(ss *session, _ context.Context, args [][]byte) string {
		if ss.s.cfg.Clustered {
			ss.err(errClusterExpiry)
			return "error"
		}
		if len(args) > 3 {
			ss.err("ERR " + name + " options (NX, XX, GT, LT) are not supported")
			return "error"
		}
		return ss.expireCommand(name, args)
	}
}

func (ss *session) ping(_ context.Context, args [][]byte) string {
	if len(args) > 1 {
		ss.bulk(args[1])
	} else {
		ss.simple("PONG")
	}
	return "ok"
}

func (ss *session) auth(_ context.Context, args [][]byte) string {
	if ss.s.cfg.Password == "" {
		ss.err("ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?")
		return "error"
	}
	if !ss.checkPassword(args[len(args)-1]) { // AUTH [user] password
		return "error"
	}
	ss.simple("OK")
	return "ok"
}

// checkPassword authenticates the connection with pass, or writes
// WRONGPASS and counts the failure. The username, if any, is not checked:
// the server has one password, as Redis's default user has.
func (ss *session) checkPassword(pass []byte) bool {
	s := ss.s
	if subtle.ConstantTimeCompare(pass, []byte(s.cfg.Password)) == 1 {
		ss.authed = true
		return true
	}
	s.metrics.AuthFailures.WithLabelValues("resp").Inc()
	ss.err("WRONGPASS invalid username-password pair or user is disabled.")
	return false
}

func (ss *session) selectDB(_ context.Context, args [][]byte) string {
	if string(args[1]) != "0" {
		ss.err("ERR DB index is out of range")
		return "error"
	}
	ss.simple("OK")
	return "ok"
}

// config answers CONFIG GET save and appendonly, which redis-benchmark
// asks for on start; anything else gets an empty array.
func (ss *session) config(_ context.Context, args [][]byte) string {
	if len(args) >= 3 && strings.EqualFold(string(args[1]), "GET") {
		key := strings.ToLower(string(args[2]))
		if val, ok := map[string]string{"save": "", "appendonly": "no"}[key]; ok {
			ss.mapHeader(1)
			ss.bulk([]byte(key))
			ss.bulk([]byte(val))
			return "ok"
		}
	}
	ss.mapHeader(0)
	return "ok"
}

// info describes the node's own memory tier, whatever section is asked.
// Its Replication section says role:master: valkey-glide's standalone
// client sends INFO REPLICATION on connecting and fails unless a node
// answers role:master.
func (ss *session) info(_ context.Context, _ [][]byte) string {
	st := ss.s.node.Tiers()[0].Stats
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Server\r\nredis_version:7.0.0\r\nwarmpath_cacheserver:1\r\n# Replication\r\nrole:master\r\nconnected_slaves:0\r\n# Memory\r\nused_memory:%d\r\nmaxmemory:%d\r\n# Keyspace\r\ndb0:keys=%d,expires=0,avg_ttl=0\r\n", st.Bytes, st.Capacity, st.Objects)
	ss.bulk(b.Bytes())
	return "ok"
}

func (ss *session) echo(_ context.Context, args [][]byte) string {
	ss.bulk(args[1])
	return "ok"
}

// hello answers HELLO [protover [AUTH username password] [SETNAME name]]
// as Redis 7 does: it authenticates like AUTH, switches the connection to
// RESP2 or RESP3, and describes the server in a map (in RESP2, a flat
// array). Errors leave the connection's protocol and auth unchanged.
func (ss *session) hello(_ context.Context, args [][]byte) string {
	proto := ss.proto
	if len(args) > 1 {
		v, err := strconv.Atoi(string(args[1]))
		if err != nil {
			ss.err("ERR Protocol version is not an integer or out of range")
			return "error"
		}
		if v < 2 || v > 3 {
			ss.err("NOPROTO unsupported protocol version")
			return "error"
		}
		proto = v
	}
	var pass []byte
	for i := 2; i < len(args); i++ {
		switch opt := strings.ToUpper(string(args[i])); {
		case opt == "AUTH" && i+2 < len(args):
			pass = args[i+2] // the username is not checked, as in AUTH
			i += 2
		case opt == "SETNAME" && i+1 < len(args):
			i++ // accepted and ignored, as CLIENT SETNAME is
		default:
			ss.err("ERR Syntax error in HELLO option '" + truncate(string(args[i]), 64) + "'")
			return "error"
		}
	}
	switch {
	case pass != nil && ss.s.cfg.Password != "":
		if !ss.checkPassword(pass) {
			return "error"
		}
	case !ss.authed:
		ss.s.metrics.AuthFailures.WithLabelValues("resp").Inc()
		ss.err("NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time")
		return "error"
	}
	// With no password configured, HELLO's AUTH is accepted whatever it
	// carries, as Redis's default user (nopass) accepts it.
	ss.proto = proto
	ss.mapHeader(7)
	for _, kv := range [][2]string{{"server", "redis"}, {"version", "7.0.0"}} {
		ss.bulk([]byte(kv[0]))
		ss.bulk([]byte(kv[1]))
	}
	ss.bulk([]byte("proto"))
	ss.integer(proto)
	ss.bulk([]byte("id"))
	ss.integer(int(ss.id))
	ss.bulk([]byte("mode"))
	ss.bulk([]byte("standalone"))
	ss.bulk([]byte("role"))
	ss.bulk([]byte("master"))
	ss.bulk([]byte("modules"))
	ss.array(0)
	return "ok"
}

// client accepts CLIENT SETINFO, SETNAME and the like, and ignores them.
func (ss *session) client(context.Context, [][]byte) string {
	ss.simple("OK")
	return "ok"
}

func (ss *session) command(context.Context, [][]byte) string {
	ss.array(0)
	return "ok"
}

// dbsize counts the node's own memory tier.
func (ss *session) dbsize(context.Context, [][]byte) string {
	ss.integer(int(ss.s.node.Tiers()[0].Objects))
	return "ok"
}

func (ss *session) quitConn(context.Context, [][]byte) string {
	ss.simple("OK")
	ss.quit = true
	return "ok"
}
