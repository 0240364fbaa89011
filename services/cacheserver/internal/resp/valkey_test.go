package resp

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/warmpath/warmpath/services/cacheserver/internal/cluster"
	"github.com/warmpath/warmpath/services/cacheserver/internal/metrics"
	"github.com/warmpath/warmpath/services/cacheserver/internal/store"
)

// encodeCommand is a command as every client sends it, in RESP3 as in
// RESP2: an array of bulk strings.
func encodeCommand(args ...string) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	return b.Bytes()
}

// readRaw reads one whole RESP2 or RESP3 reply and returns its bytes as
// sent, so a test can compare them exactly.
func readRaw(br *bufio.Reader) (string, error) {
	line, err := br.ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("read reply line: %w", err)
	}
	if len(line) < 3 || !strings.HasSuffix(line, "\r\n") {
		return "", fmt.Errorf("reply line %q", line)
	}
	body := line[1 : len(line)-2]
	var elems int
	switch line[0] {
	case '+', '-', ':', '_', ',', '#':
		return line, nil
	case '$', '=', '!':
		n, err := strconv.Atoi(body)
		if err != nil {
			return "", fmt.Errorf("length %q: %w", body, err)
		}
		if n < 0 {
			return line, nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(br, buf); err != nil {
			return "", fmt.Errorf("read bulk: %w", err)
		}
		return line + string(buf), nil
	case '*', '~', '>':
		elems, err = strconv.Atoi(body)
	case '%', '|':
		elems, err = strconv.Atoi(body)
		elems *= 2
	default:
		return "", fmt.Errorf("unknown reply type in %q", line)
	}
	if err != nil {
		return "", fmt.Errorf("count %q: %w", body, err)
	}
	out := line
	for range max(elems, 0) {
		e, err := readRaw(br)
		if err != nil {
			return "", err
		}
		out += e
	}
	return out, nil
}

// helloMap is the HELLO reply for a connection with the given id.
func helloMap(proto, id int) string {
	var b []byte
	if proto == 3 {
		b = appendMap(b, 7)
	} else {
		b = appendArray(b, 14)
	}
	for _, kv := range [][2]string{{"server", "redis"}, {"version", "7.0.0"}} {
		b = appendBulk(appendBulk(b, []byte(kv[0])), []byte(kv[1]))
	}
	b = appendInt(appendBulk(b, []byte("proto")), int64(proto))
	b = appendInt(appendBulk(b, []byte("id")), int64(id))
	b = appendBulk(appendBulk(b, []byte("mode")), []byte("standalone"))
	b = appendBulk(appendBulk(b, []byte("role")), []byte("master"))
	b = appendArray(appendBulk(b, []byte("modules")), 0)
	return string(b)
}

// step is one flight of pipelined commands and the replies expected for
// each; a want ending in "..." is a prefix, "~sub" a substring.
type step struct {
	name string
	cmds [][]string
	want []string
}

// replay sends each step's commands in one write, as a pipelining client
// does, and checks every reply in order.
func replay(t *testing.T, addr string, steps []step) {
	t.Helper()
	c := dialRaw(t, addr)
	for _, st := range steps {
		var out []byte
		for _, cmd := range st.cmds {
			out = append(out, encodeCommand(cmd...)...)
		}
		_ = c.conn.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.conn.Write(out); err != nil {
			t.Fatalf("%s: write: %v", st.name, err)
		}
		for i, want := range st.want {
			got, err := readRaw(c.br)
			if err != nil {
				t.Fatalf("%s: reply %d: %v", st.name, i, err)
			}
			ok := got == want
			switch {
			case strings.HasSuffix(want, "..."):
				ok = strings.HasPrefix(got, strings.TrimSuffix(want, "..."))
			case strings.HasPrefix(want, "~"):
				ok = strings.Contains(got, want[1:])
			}
			if !ok {
				t.Fatalf("%s: reply %d = %q, want %q", st.name, i, got, want)
			}
		}
	}
}

// TestValkeyConnectorSequence replays, byte for byte over TCP, what
// LMCache's valkey:// connector sends through valkey-glide 2.x, as read
// from their sources (not copied):
//
//   - LMCache lmcache/v1/storage_backend/connector/valkey_connector.py and
//     valkey_adapter.py, at commits ccef52f03290bf4cea60d922eef4b0d171f48e9b
//     and 936fd082802b7c72a593e3f3d86e1215291bd672: keys are
//     "<CacheEngineKey.to_string()>:metadata" and ":kv_bytes" (in cluster
//     mode "{<key>}:metadata", "{<key>}:kv_bytes"); put is a non-atomic
//     Batch (a pipeline, no MULTI) of SET kv_bytes then SET metadata;
//     exists is EXISTS of the metadata key; get is MGET metadata kv_bytes,
//     a null metadata being a miss. GlideClient is created with
//     ServerCredentials when a username or password is configured and a
//     database_id when valkey_database is set.
//   - valkey-glide 2.5.2-rc1 (7d61630b076946608e2c87567905df6b33eba0d8),
//     glide-core/redis-rs/redis/src/aio/mod.rs setup_connection and
//     commands/mod.rs resp3_hello: "HELLO 3" (RESP3 is glide's default),
//     with "AUTH <username or default> <password>" when a password is set;
//     SELECT <db> only when db != 0; CLIENT SETNAME only with a client
//     name; then CLIENT SETINFO LIB-NAME and LIB-VER, pipelined, their
//     replies ignored. glide-core/src/client/standalone_client.rs then
//     sends INFO REPLICATION on every address and fails with no primary
//     unless a reply contains "role:master"; reconnecting_connection.rs
//     checks a reconnected connection with PING.
func TestValkeyConnectorSequence(t *testing.T) {
	const key = "vllm@meta-llama/Llama-3.1-8B@1@0@3f2a9c1b7e6d5a40@bfloat16"
	meta := string(bytes.Repeat([]byte{7}, 28))           // RemoteMetadata.serialize()
	kv := string(bytes.Repeat([]byte{0xA5, 0x00}, 1<<19)) // one 1 MiB chunk
	addr, _ := start(t, Config{Password: "tok"})
	replay(t, addr, []step{
		{"connect: HELLO 3 with AUTH",
			[][]string{{"HELLO", "3", "AUTH", "default", "tok"}},
			[]string{helloMap(3, 1)}},
		{"connect: CLIENT SETINFO, pipelined",
			[][]string{{"CLIENT", "SETINFO", "LIB-NAME", "GlidePy"}, {"CLIENT", "SETINFO", "LIB-VER", "2.0.1"}},
			[]string{"+OK\r\n", "+OK\r\n"}},
		{"connect: INFO REPLICATION finds a primary",
			[][]string{{"INFO", "REPLICATION"}},
			[]string{"~\r\nrole:master\r\n"}},
		{"miss: EXISTS metadata",
			[][]string{{"EXISTS", key + ":metadata"}},
			[]string{":0\r\n"}},
		{"miss: MGET metadata kv_bytes gives RESP3 nulls",
			[][]string{{"MGET", key + ":metadata", key + ":kv_bytes"}},
			[]string{"*2\r\n_\r\n_\r\n"}},
		{"put: Batch(False) of SET kv_bytes then SET metadata",
			[][]string{{"SET", key + ":kv_bytes", kv}, {"SET", key + ":metadata", meta}},
			[]string{"+OK\r\n", "+OK\r\n"}},
		{"hit: EXISTS metadata",
			[][]string{{"EXISTS", key + ":metadata"}},
			[]string{":1\r\n"}},
		{"hit: MGET metadata kv_bytes",
			[][]string{{"MGET", key + ":metadata", key + ":kv_bytes"}},
			[]string{fmt.Sprintf("*2\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n", len(meta), meta, len(kv), kv)}},
		{"hit and miss pipelined, cluster-mode hash-tag keys",
			[][]string{
				{"SET", "{" + key + "}:kv_bytes", kv}, {"SET", "{" + key + "}:metadata", meta},
				{"MGET", "{" + key + "}:metadata", "{" + key + "}:kv_bytes"},
				{"MGET", "{absent}:metadata", "{absent}:kv_bytes"},
				{"GET", "absent"},
			},
			[]string{"+OK\r\n", "+OK\r\n",
				fmt.Sprintf("*2\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n", len(meta), meta, len(kv), kv),
				"*2\r\n_\r\n_\r\n", "_\r\n"}},
		{"reconnect check: PING",
			[][]string{{"PING"}},
			[]string{"+PONG\r\n"}},
	})
}

// TestHello: HELLO's options, errors and protocol switch, as Redis 7
// answers them.
func TestHello(t *testing.T) {
	noauth := "-NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time\r\n"
	tests := []struct {
		name     string
		password string
		steps    []step
	}{
		{"no password: HELLO 3 then RESP3 nulls", "", []step{
			{"hello", [][]string{{"HELLO", "3"}}, []string{helloMap(3, 1)}},
			{"get", [][]string{{"GET", "k"}, {"MGET", "k"}}, []string{"_\r\n", "*1\r\n_\r\n"}},
			{"config map", [][]string{{"CONFIG", "GET", "appendonly"}}, []string{"%1\r\n$10\r\nappendonly\r\n$2\r\nno\r\n"}},
		}},
		{"HELLO without a version keeps RESP2", "", []step{
			{"hello", [][]string{{"HELLO"}}, []string{helloMap(2, 1)}},
			{"get", [][]string{{"GET", "k"}}, []string{"$-1\r\n"}},
		}},
		{"HELLO 2 after HELLO 3 goes back", "", []step{
			{"hello 3", [][]string{{"HELLO", "3"}, {"HELLO", "2"}}, []string{helloMap(3, 1), helloMap(2, 1)}},
			{"get", [][]string{{"GET", "k"}}, []string{"$-1\r\n"}},
		}},
		{"HELLO 3 SETNAME", "", []step{
			{"hello", [][]string{{"HELLO", "3", "SETNAME", "lmcache"}}, []string{helloMap(3, 1)}},
		}},
		{"HELLO AUTH without a password configured is accepted", "", []step{
			{"hello", [][]string{{"HELLO", "3", "AUTH", "default", "x"}}, []string{helloMap(3, 1)}},
		}},
		{"unsupported versions", "", []step{
			{"hello", [][]string{{"HELLO", "4"}, {"HELLO", "1"}, {"HELLO", "three"}},
				[]string{"-NOPROTO unsupported protocol version\r\n", "-NOPROTO unsupported protocol version\r\n",
					"-ERR Protocol version is not an integer or out of range\r\n"}},
			{"still RESP2", [][]string{{"GET", "k"}}, []string{"$-1\r\n"}},
		}},
		{"syntax errors", "", []step{
			{"hello", [][]string{{"HELLO", "3", "AUTH", "default"}, {"HELLO", "3", "FOO"}},
				[]string{"-ERR Syntax error in HELLO option 'AUTH'\r\n", "-ERR Syntax error in HELLO option 'FOO'\r\n"}},
		}},
		{"password: HELLO 3 without AUTH", "tok", []step{
			{"hello", [][]string{{"HELLO", "3"}, {"GET", "k"}}, []string{noauth, "-NOAUTH Authentication required.\r\n"}},
		}},
		{"password: wrong AUTH leaves the connection unauthenticated on RESP2", "tok", []step{
			{"hello", [][]string{{"HELLO", "3", "AUTH", "default", "nope"}, {"GET", "k"}},
				[]string{"-WRONGPASS invalid username-password pair or user is disabled.\r\n", "-NOAUTH Authentication required.\r\n"}},
		}},
		{"password: HELLO 3 AUTH then RESP3, and MSET", "tok", []step{
			{"hello", [][]string{{"HELLO", "3", "AUTH", "default", "tok", "SETNAME", "w"}}, []string{helloMap(3, 1)}},
			{"mset", [][]string{{"MSET", "a", "1", "b", "2"}, {"MGET", "a", "b", "c"}},
				[]string{"+OK\r\n", "*3\r\n$1\r\n1\r\n$1\r\n2\r\n_\r\n"}},
			{"mset arity", [][]string{{"MSET", "a", "1", "b"}}, []string{"-ERR wrong number of arguments for 'mset' command\r\n"}},
		}},
		{"password: AUTH then HELLO 3 without AUTH", "tok", []step{
			{"auth", [][]string{{"AUTH", "tok"}, {"HELLO", "3"}}, []string{"+OK\r\n", helloMap(3, 1)}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr, _ := start(t, Config{Password: tt.password})
			replay(t, addr, tt.steps)
		})
	}
}

// TestHelloPreAuthLimits: HELLO is bound by the pre-AUTH limits like any
// command from an unauthenticated client.
func TestHelloPreAuthLimits(t *testing.T) {
	addr, _ := start(t, Config{Password: "tok"})
	c := dialRaw(t, addr)
	args := [][]byte{[]byte("HELLO"), []byte("3"), []byte("AUTH"), []byte("default"), bytes.Repeat([]byte("p"), 17<<10)}
	reply, err := c.do(args...)
	if err != nil || !strings.HasPrefix(string(reply), "-ERR Protocol error: unauthenticated client") {
		t.Fatalf("reply %q, %v; want a pre-auth protocol error", reply, err)
	}
}

// TestGoRedisRESP3: go-redis (already this module's dependency) opens
// with HELLO 3 AUTH and reads RESP3 replies.
func TestGoRedisRESP3(t *testing.T) {
	addr, _ := start(t, Config{Password: "tok"})
	rdb := redis.NewClient(&redis.Options{Addr: addr, Protocol: 3, Password: "tok", ClientName: "warmpath-test"})
	defer rdb.Close()
	ctx := context.Background()
	hello, err := rdb.Do(ctx, "HELLO", "3").Result()
	if err != nil {
		t.Fatal(err)
	}
	m, ok := hello.(map[any]any)
	if !ok || m["proto"] != int64(3) || m["role"] != "master" {
		t.Fatalf("HELLO 3 = %#v", hello)
	}
	if err := rdb.MSet(ctx, "k:metadata", "m", "k:kv_bytes", strings.Repeat("v", 1<<20)).Err(); err != nil {
		t.Fatal(err)
	}
	vals, err := rdb.MGet(ctx, "k:metadata", "k:kv_bytes", "absent:metadata").Result()
	if err != nil || len(vals) != 3 || vals[0] != "m" || len(vals[1].(string)) != 1<<20 || vals[2] != nil {
		t.Fatalf("MGET: %d values, %v", len(vals), err)
	}
	if _, err := rdb.Get(ctx, "absent").Result(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET miss: %v, want redis.Nil", err)
	}
	info, err := rdb.Info(ctx, "replication").Result()
	if err != nil || !strings.Contains(info, "role:master") {
		t.Fatalf("INFO replication: %q, %v", info, err)
	}
	cfg, err := rdb.ConfigGet(ctx, "appendonly").Result()
	if err != nil || cfg["appendonly"] != "no" {
		t.Fatalf("CONFIG GET: %v, %v", cfg, err)
	}
	wrong := redis.NewClient(&redis.Options{Addr: addr, Protocol: 3, Password: "nope"})
	defer wrong.Close()
	if err := wrong.Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Fatalf("wrong password over HELLO: %v", err)
	}
}

// recording is a Backend that notes the keys written through it.
type recording struct {
	cluster.Local
	mu   sync.Mutex
	puts []string
}

func (r *recording) Put(ctx context.Context, key string, obj *store.Object) bool {
	r.mu.Lock()
	r.puts = append(r.puts, key)
	r.mu.Unlock()
	return r.Local.Put(ctx, key, obj)
}

// TestMSetThroughBackend: in cluster mode MSET and MGET go through the
// cluster backend, as SET and GET do, not the node's own store.
func TestMSetThroughBackend(t *testing.T) {
	mem := store.NewMemory(16<<20, store.Options{})
	backend := &recording{Local: cluster.Local{Mem: mem}}
	srv := New(Config{Clustered: true}, backend, store.NewMemory(1<<20, store.Options{}), metrics.New(prometheus.NewRegistry(), mem), nil)
	addr := serveWith(t, srv)
	replay(t, addr, []step{
		{"pipelined", [][]string{{"HELLO", "3"}, {"MSET", "a:kv_bytes", "v", "a:metadata", "m"}, {"MGET", "a:metadata", "a:kv_bytes", "b:metadata"}},
			[]string{helloMap(3, 1), "+OK\r\n", "*3\r\n$1\r\nm\r\n$1\r\nv\r\n_\r\n"}},
	})
	backend.mu.Lock()
	defer backend.mu.Unlock()
	if strings.Join(backend.puts, ",") != "a:kv_bytes,a:metadata" {
		t.Fatalf("backend saw puts %v", backend.puts)
	}
}
