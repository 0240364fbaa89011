package resp

import (
	"context"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/warmpath/warmpath/services/cacheserver/internal/cluster"
	"github.com/warmpath/warmpath/services/cacheserver/internal/metrics"
	"github.com/warmpath/warmpath/services/cacheserver/internal/store"
)

func TestArity(t *testing.T) {
	tests := []struct {
		arity, n int
		want     bool
	}{
		{2, 2, true}, {2, 1, false}, {2, 3, false},
		{-2, 1, false}, {-2, 2, true}, {-2, 9, true},
	}
	for _, tt := range tests {
		if got := (&command{arity: tt.arity}).arityOK(tt.n); got != tt.want {
			t.Errorf("arity %d, %d arguments: %v, want %v", tt.arity, tt.n, got, tt.want)
		}
	}
}

// TestCommandMetricsOnce: every command, whatever its outcome, is counted
// once, under its table name; unknown names share one label.
func TestCommandMetricsOnce(t *testing.T) {
	mem := store.NewMemory(16<<20, store.Options{})
	m := metrics.New(prometheus.NewRegistry(), mem)
	addr := serveWith(t, New(Config{Password: "pw"}, cluster.Local{Mem: mem}, mem, m, slog.New(slog.DiscardHandler)))
	c := dialRaw(t, addr)
	steps := []struct {
		args []string
		want string
	}{
		{[]string{"GET", "k"}, "-NOAUTH Authentication required."},
		{[]string{"AUTH", "pw"}, "+OK"},
		{[]string{"GET", "k"}, "$-1"},
		{[]string{"SET", "k", "v"}, "+OK"},
		{[]string{"GET", "k"}, "v"},
		{[]string{"GET"}, "-ERR wrong number of arguments for 'get' command"},
		{[]string{"UNLINK", "k"}, ":1"},
		{[]string{"NOSUCH", "x"}, "-ERR unknown command 'NOSUCH'"},
	}
	for _, st := range steps {
		var args [][]byte
		for _, a := range st.args {
			args = append(args, []byte(a))
		}
		if r, err := c.do(args...); err != nil || string(r) != st.want {
			t.Fatalf("%v: %q, %v; want %q", st.args, r, err, st.want)
		}
	}
	counts := []struct {
		op, result string
		want       float64
	}{
		{"get", "error", 2}, {"get", "miss", 1}, {"get", "hit", 1},
		{"auth", "ok", 1}, {"set", "ok", 1}, {"delete", "ok", 1}, {"unknown", "error", 1},
	}
	for _, c := range counts {
		if got := testutil.ToFloat64(m.Requests.WithLabelValues("resp", c.op, c.result)); got != c.want {
			t.Errorf("requests{op=%s,result=%s} = %v, want %v", c.op, c.result, got, c.want)
		}
	}
	if got := testutil.ToFloat64(m.AuthFailures.WithLabelValues("resp")); got != 1 {
		t.Errorf("auth failures = %v, want 1", got)
	}
}

// panicky is a backend with a bug on one key.
type panicky struct{ cluster.Local }

func (p panicky) Get(ctx context.Context, key string) (*store.Object, bool) {
	if key == "boom" {
		panic("backend bug")
	}
	return p.Local.Get(ctx, key)
}

// TestPanicIsPerConnection: a command that panics closes its own
// connection; the server and other connections go on.
func TestPanicIsPerConnection(t *testing.T) {
	mem := store.NewMemory(16<<20, store.Options{})
	m := metrics.New(prometheus.NewRegistry(), mem)
	addr := serveWith(t, New(Config{Clustered: true}, panicky{cluster.Local{Mem: mem}}, mem, m, slog.New(slog.DiscardHandler)))
	other := dialRaw(t, addr)
	if r, err := other.do([]byte("PING")); err != nil || string(r) != "+PONG" {
		t.Fatalf("PING: %q, %v", r, err)
	}
	bad := dialRaw(t, addr)
	if _, err := io.WriteString(bad.conn, "*2\r\n$3\r\nGET\r\n$4\r\nboom\r\n"); err != nil {
		t.Fatal(err)
	}
	_ = bad.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if rest, err := io.ReadAll(bad.br); err != nil || len(rest) != 0 {
		t.Fatalf("after a panic: %q, %v; want a closed connection", rest, err)
	}
	if r, err := other.do([]byte("SET"), []byte("k"), []byte("v")); err != nil || string(r) != "+OK" {
		t.Fatalf("other connection after the panic: %q, %v", r, err)
	}
	if r, err := dialRaw(t, addr).do([]byte("GET"), []byte("k")); err != nil || string(r) != "v" {
		t.Fatalf("new connection after the panic: %q, %v", r, err)
	}
}

// serveWith runs srv on a loopback listener for the test's duration.
func serveWith(t *testing.T, srv *Server) string {
	t.Helper()
	var lc net.ListenConfig
	ln, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return ln.Addr().String()
}
