package faults

import (
	"bufio"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warmpath/warmpath/libs/lmproto"
	"github.com/warmpath/warmpath/tests/harness"
)

// TestCacheServerHostilePeers points hostile clients at a cache server with
// a RESP password while two well-behaved clients (lm:// and authenticated
// RESP) store and read objects of known content: RESP commands announcing
// 256 MiB before AUTH, wrong passwords, values announcing 256 MiB after AUTH
// and 1 GiB (over --max-value-bytes), lm:// garbage and a PUT announcing
// 2 GiB, the RESP ones after AUTH held open with 64 KiB sent, and lm://
// PUTs announcing 256 MiB held open with 64 KiB sent. The well-behaved
// clients never fail and every read is exact; the process's resident
// memory (process_resident_memory_bytes) stays bounded. (The held lm://
// PUTs used to reserve their whole announced size of the memory tier, which
// emptied it and stalled every other writer; reservations now follow the
// bytes that arrive: lmproto's TestReserveFollowsArrivingBytes.)

func TestCacheServerHostilePeers(t *testing.T) {
	const (
		password = "s3cret-faults"
		memCap   = 64 << 20
		// rssLimit bounds the process's RSS throughout: the memory tier's
		// capacity and its Go overhead, far below the GiBs announced.
		rssLimit = 192 << 20
		rounds   = 4 // of hostile connections, 2 s apart
		perRound = 8 // held-open connections per kind and round
		goodRate = 20
	)
	cache := startCache(t, harness.Spec{
		Args: cacheArgs("--memory-capacity-bytes", itoa(memCap), "--max-value-bytes", itoa(256<<20)),
		Env:  map[string]string{"WARMPATH_CACHESERVER_PASSWORD": password},
	})
	lmAddr, respAddr := hostPort(t, cache, lmPort), hostPort(t, cache, respPort)
	sc := &scenario{Fault: "hostile RESP (oversize before and after AUTH, wrong passwords) and lm:// (garbage, oversize PUTs) clients, many held open, beside well-behaved lm:// and RESP clients",
		Rate: goodRate, Recovery: map[string]float64{}, Extra: map[string]float64{}}
	record(t, "cache_server_hostile_peers", sc)

	rss := func() float64 {
		v, ok, err := metric(t.Context(), cache.URL, "process_resident_memory_bytes", "")
		if err != nil || !ok {
			t.Errorf("process_resident_memory_bytes: %v (found %v)", err, ok)
		}
		return v
	}
	baseline := rss()

	// The well-behaved clients, until stop, which a failure midway runs
	// too: nothing may log after the test ends.
	stopCh := make(chan struct{})
	var wg sync.WaitGroup
	stop := sync.OnceFunc(func() { close(stopCh); wg.Wait() })
	defer stop()
	var goodOps, goodFail atomic.Int64
	var slowest atomic.Int64
	good := func(name string, op func(ctx context.Context, i int) error) {
		wg.Go(func() {
			tick := time.NewTicker(time.Second / goodRate)
			defer tick.Stop()
			for i := 0; ; i++ {
				select {
				case <-stopCh:
					return
				case <-tick.C:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				start := time.Now()
				err := op(ctx, i)
				cancel()
				d := time.Since(start)
				for {
					s := slowest.Load()
					if int64(d) <= s || slowest.CompareAndSwap(s, int64(d)) {
						break
					}
				}
				goodOps.Add(1)
				if err != nil {
					goodFail.Add(1)
					t.Errorf("%s client, op %d: %v", name, i, err)
				}
			}
		})
	}
	lm := lmproto.Dial(lmAddr, 10*time.Second, 0)
	defer lm.Close()
	good("lm://", func(ctx context.Context, i int) error {
		k := fmt.Sprintf("good-lm-%05d", i)
		if err := lm.Put(ctx, k, objMeta(i), smallValue(k)); err != nil {
			return err
		}
		v, _, err := lm.Get(ctx, k)
		if err == nil && !slices.Equal(v, smallValue(k)) {
			err = fmt.Errorf("GET %s: not what was stored", k)
		}
		return err
	})
	rc := &respClient{addr: respAddr, password: password}
	defer rc.close()
	good("RESP", func(ctx context.Context, i int) error {
		k := fmt.Sprintf("good-resp-%05d", i)
		return rc.setGet(ctx, k, smallValue(k))
	})

	// The hostile ones.
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	dial := func(addr string) net.Conn {
		t.Helper()
		var d net.Dialer
		c, err := d.DialContext(t.Context(), "tcp", addr)
		if err != nil {
			t.Fatalf("dial %s: %v", addr, err)
		}
		conns = append(conns, c)
		return c
	}
	send := func(c net.Conn, b []byte) {
		_ = c.SetWriteDeadline(time.Now().Add(5 * time.Second))
		_, _ = c.Write(b) // the server may have closed it already
	}
	// expectClose reads what the server answers until it closes c.
	expectClose := func(c net.Conn, prefix string) error {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		reply, err := io.ReadAll(c)
		if err != nil {
			return fmt.Errorf("reply %q: %w (want %q and a close)", reply, err, prefix)
		}
		if !strings.HasPrefix(string(reply), prefix) {
			return fmt.Errorf("reply %q, want %q and a close", reply, prefix)
		}
		return nil
	}
	partial := make([]byte, 64<<10)
	_, _ = rand.Read(partial)
	lmHeader := func(cmd, length int32) []byte {
		b, err := lmproto.AppendRequest(nil, &lmproto.RequestHeader{Command: cmd, Meta: lmproto.Meta{Length: length}, Key: "hostile"})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	peak := baseline
	closed, held := 0, 0
	hostileStart := time.Now()
	for round := range rounds {
		for range perRound {
			// RESP before AUTH: a value announced at 256 MiB, refused at
			// once; a read gets NOAUTH; a wrong password WRONGPASS.
			c := dial(respAddr)
			send(c, []byte("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$268435456\r\n"))
			if err := expectClose(c, "-ERR Protocol error: unauthenticated client"); err != nil {
				t.Errorf("RESP oversize before AUTH: %v", err)
			}
			closed++
			c = dial(respAddr)
			send(c, []byte("*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*2\r\n$4\r\nAUTH\r\n$5\r\nwrong\r\n"))
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			br := bufio.NewReader(c)
			l1, err1 := br.ReadString('\n')
			l2, err2 := br.ReadString('\n')
			if err1 != nil || err2 != nil || !strings.HasPrefix(l1, "-NOAUTH") || !strings.HasPrefix(l2, "-WRONGPASS") {
				t.Errorf("RESP GET before AUTH, then a wrong AUTH: %q %v, %q %v; want -NOAUTH, -WRONGPASS", l1, err1, l2, err2)
			}
			// After AUTH: 256 MiB announced, 64 KiB sent, held open; and
			// 1 GiB, over --max-value-bytes, refused.
			c = dial(respAddr)
			send(c, []byte("*2\r\n$4\r\nAUTH\r\n$"+itoa(len(password))+"\r\n"+password+"\r\n*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$268435456\r\n"))
			send(c, partial)
			held++
			c = dial(respAddr)
			send(c, []byte("*2\r\n$4\r\nAUTH\r\n$"+itoa(len(password))+"\r\n"+password+"\r\n*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1073741824\r\n"))
			if err := expectClose(c, "+OK\r\n-ERR Protocol error"); err != nil {
				t.Errorf("RESP 1 GiB SET after AUTH: %v", err)
			}
			closed++
			// lm://: a PUT announcing 256 MiB, 64 KiB sent, held open; one
			// announcing 2 GiB - 1 (over the limit) and random garbage,
			// both closed without a reply.
			c = dial(lmAddr)
			send(c, lmHeader(lmproto.CmdPut, 256<<20))
			send(c, partial)
			held++
			c = dial(lmAddr)
			send(c, append(lmHeader(lmproto.CmdPut, 1<<31-1), partial[:4096]...))
			if err := expectClose(c, ""); err != nil {
				t.Errorf("lm:// PUT of 2 GiB: %v", err)
			}
			closed++
			c = dial(lmAddr)
			send(c, partial[:lmproto.RequestHeaderSize*4])
			if err := expectClose(c, ""); err != nil {
				t.Errorf("lm:// garbage: %v", err)
			}
			closed++
		}
		peak = max(peak, rss())
		t.Logf("round %d: %d connections held open, RSS %.0f MiB", round+1, held, rss()/(1<<20))
		time.Sleep(2 * time.Second)
		peak = max(peak, rss())
	}
	stop()
	end := rss()
	peak = max(peak, end)
	protoErrs, _, _ := harnessSum(t, cache.URL, "warmpath_cache_protocol_errors_total")
	authFails, _, _ := harnessSum(t, cache.URL, "warmpath_cache_auth_failures_total")
	sc.Duration = round(time.Since(hostileStart).Seconds())
	sc.Extra["good_ops"], sc.Extra["good_ops_failed"] = float64(goodOps.Load()), float64(goodFail.Load())
	sc.Extra["good_slowest_op_seconds"] = round(time.Duration(slowest.Load()).Seconds())
	sc.Extra["hostile_connections_held_open"] = float64(held)
	sc.Extra["hostile_connections_closed_by_server"] = float64(closed)
	sc.Extra["rss_baseline_mib"], sc.Extra["rss_peak_mib"], sc.Extra["rss_end_mib"] = round(baseline/(1<<20)), round(peak/(1<<20)), round(end/(1<<20))
	sc.Extra["protocol_errors"], sc.Extra["auth_failures"] = protoErrs, authFails
	t.Logf("%d good ops (%d failed, slowest %v); %d hostile connections held open, %d closed by the server; RSS %.0f MiB before, %.0f peak, %.0f at the end; %v protocol errors, %v auth failures",
		goodOps.Load(), goodFail.Load(), time.Duration(slowest.Load()), held, closed, baseline/(1<<20), peak/(1<<20), end/(1<<20), protoErrs, authFails)
	if peak > rssLimit {
		t.Errorf("RSS peaked at %.0f MiB, want ≤ %d MiB", peak/(1<<20), rssLimit>>20)
	}
	if goodOps.Load() < int64(goodRate*sc.Duration) {
		t.Errorf("only %d good ops in %.1fs, want about %v", goodOps.Load(), sc.Duration, 2*goodRate*sc.Duration)
	}
	if sc.Extra["good_slowest_op_seconds"] > 5 {
		t.Errorf("the slowest good op took %.2fs, want ≤ 5 s", sc.Extra["good_slowest_op_seconds"])
	}
}

// harnessSum sums a metric's samples over its labels at base/metrics.
func harnessSum(t *testing.T, base, name string) (float64, bool, error) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	b, err := harness.GetBody(ctx, base+"/metrics")
	if err != nil {
		return 0, false, err
	}
	return harness.SumSamples(b, name)
}

// respClient is a minimal RESP2 client: AUTH once per connection, then
// SET and GET; on any error the connection is dropped and redialled.
type respClient struct {
	addr, password string
	conn           net.Conn
	br             *bufio.Reader
}

func (r *respClient) close() {
	if r.conn != nil {
		_ = r.conn.Close()
		r.conn = nil
	}
}

func (r *respClient) cmd(args ...[]byte) (string, []byte, error) {
	var b []byte
	b = fmt.Appendf(b, "*%d\r\n", len(args))
	for _, a := range args {
		b = fmt.Appendf(b, "$%d\r\n", len(a))
		b = append(b, a...)
		b = append(b, "\r\n"...)
	}
	if _, err := r.conn.Write(b); err != nil {
		return "", nil, err
	}
	line, err := r.br.ReadString('\n')
	if err != nil {
		return "", nil, err
	}
	if !strings.HasPrefix(line, "$") {
		return line, nil, nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(line[1:]))
	if err != nil {
		return "", nil, fmt.Errorf("bulk header %q: %w", line, err)
	}
	if n < 0 {
		return line, nil, nil
	}
	v := make([]byte, n+2)
	if _, err := io.ReadFull(r.br, v); err != nil {
		return "", nil, err
	}
	return line, v[:n], nil
}

func (r *respClient) setGet(ctx context.Context, key string, value []byte) (err error) {
	defer func() {
		if err != nil {
			r.close()
		}
	}()
	if r.conn == nil {
		var d net.Dialer
		if r.conn, err = d.DialContext(ctx, "tcp", r.addr); err != nil {
			return err
		}
		r.br = bufio.NewReader(r.conn)
		if dl, ok := ctx.Deadline(); ok {
			_ = r.conn.SetDeadline(dl)
		}
		if line, _, err := r.cmd([]byte("AUTH"), []byte(r.password)); err != nil || line != "+OK\r\n" {
			return errors.Join(fmt.Errorf("AUTH: %q", line), err)
		}
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = r.conn.SetDeadline(dl)
	}
	if line, _, err := r.cmd([]byte("SET"), []byte(key), value); err != nil || line != "+OK\r\n" {
		return errors.Join(fmt.Errorf("SET %s: %q", key, line), err)
	}
	_, v, err := r.cmd([]byte("GET"), []byte(key))
	if err != nil {
		return fmt.Errorf("GET %s: %w", key, err)
	}
	if !slices.Equal(v, value) {
		return fmt.Errorf("GET %s: %d bytes, not what was stored", key, len(v))
	}
	return nil
}
