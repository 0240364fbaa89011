package testredis

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warmpath/warmpath/libs/testnet"
)

// slots is a Redis Cluster's hash slot count.
const slots = 16384

// Cluster is a real Redis Cluster of masters without replicas, each a
// redis-server process on loopback, for tests. Stop and Start take one
// node down and back (same port, same directory: it keeps its slots and,
// through its append-only file, its data), as a crashed and restarted
// node would.
type Cluster struct {
	t     testing.TB
	bin   string
	extra []string
	mu    sync.Mutex
	nodes []*node
}

type node struct {
	port, busPort int
	dir           string
	p             *proc // nil while stopped
}

// StartCluster runs n redis-server masters in cluster mode (extra
// arguments appended to each server's command line), splits the slots
// among them in equal ranges and waits until every node reports the
// cluster ok. Every process is killed when the test ends.
func StartCluster(t testing.TB, n int, extra ...string) *Cluster {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal("redis-server not on PATH: run `make tools` (Debian's redis-server package)")
	}
	c := &Cluster{t: t, bin: bin, extra: extra}
	t.Cleanup(func() {
		for i := range c.nodes {
			c.Stop(i)
		}
	})
	for i := range n {
		nd := &node{dir: filepath.Join(t.TempDir(), strconv.Itoa(i))}
		c.nodes = append(c.nodes, nd)
		onFreePorts(t, fmt.Sprintf("node %d", i), func() error {
			nd.port, nd.busPort = testnet.FreePort(t), testnet.FreePort(t)
			return c.start(i)
		})
	}
	for i := range c.nodes {
		// distinct epochs up front spare the nodes resolving a collision
		mustOK(t, c.Addr(i), "CLUSTER", "SET-CONFIG-EPOCH", strconv.Itoa(i+1))
		from, to := i*slots/n, (i+1)*slots/n-1
		mustOK(t, c.Addr(i), "CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(from), strconv.Itoa(to))
	}
	for i := 1; i < n; i++ {
		mustOK(t, c.Addr(i), "CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(c.nodes[0].port), strconv.Itoa(c.nodes[0].busPort))
	}
	for i := range c.nodes {
		c.WaitOK(i, 30*time.Second)
		// ok means every slot is covered in the node's view; the node
		// may not have met every master yet, and a client then meets
		// MOVED replies the cluster has not settled.
		c.waitInfo(i, 30*time.Second, "cluster_known_nodes:"+strconv.Itoa(n), "cluster_size:"+strconv.Itoa(n))
	}
	return c
}

// waitInfo waits until node i's CLUSTER INFO holds every one of want.
func (c *Cluster) waitInfo(i int, d time.Duration, want ...string) {
	c.t.Helper()
	deadline := time.Now().Add(d)
	for {
		info, err := command(c.Addr(i), "CLUSTER", "INFO")
		missing := err != nil
		for _, w := range want {
			missing = missing || !strings.Contains(info, w+"\r\n")
		}
		if !missing {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("node %d: cluster info lacks %q after %v: %q %v", i, want, d, info, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Addr is node i's host:port.
func (c *Cluster) Addr(i int) string { return "127.0.0.1:" + strconv.Itoa(c.nodes[i].port) }

// Addrs is every node's host:port.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.nodes))
	for i := range c.nodes {
		out[i] = c.Addr(i)
	}
	return out
}

// Start starts node i again, on its port and in its directory, and
// waits until it accepts connections.
func (c *Cluster) Start(i int) {
	c.t.Helper()
	if err := c.start(i); err != nil {
		c.t.Fatalf("node %d: %v", i, err)
	}
}

func (c *Cluster) start(i int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	nd := c.nodes[i]
	if nd.p != nil {
		return fmt.Errorf("node %d is running", i)
	}
	if err := os.MkdirAll(nd.dir, 0o755); err != nil {
		return err
	}
	args := []string{"--port", strconv.Itoa(nd.port), "--bind", "127.0.0.1",
		"--cluster-enabled", "yes", "--cluster-port", strconv.Itoa(nd.busPort),
		"--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000",
		"--appendonly", "yes", "--save", "", "--dir", nd.dir,
		"--maxmemory", "256mb", "--maxmemory-policy", "allkeys-lru"}
	p, err := launch(c.t, c.bin, append(args, c.extra...), c.Addr(i))
	if err != nil {
		return err
	}
	nd.p = p
	return nil
}

// Stop kills node i (SIGKILL, by its PID) and waits for it to exit; a
// stopped node is left alone.
func (c *Cluster) Stop(i int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	nd := c.nodes[i]
	if nd.p == nil {
		return
	}
	nd.p.kill()
	nd.p = nil
}

// WaitOK waits until node i reports cluster_state:ok.
func (c *Cluster) WaitOK(i int, d time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(d)
	for {
		info, err := command(c.Addr(i), "CLUSTER", "INFO")
		if err == nil && strings.Contains(info, "cluster_state:ok") {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("node %d: cluster not ok after %v: %q %v", i, d, info, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// SlotOwner is the index of the node serving slot, from node from's map.
func (c *Cluster) SlotOwner(from, slot int) int {
	c.t.Helper()
	out, err := command(c.Addr(from), "CLUSTER", "NODES")
	if err != nil {
		c.t.Fatal(err)
	}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 9 {
			continue
		}
		for _, r := range f[8:] {
			lo, hi, ok := strings.Cut(r, "-")
			if !ok {
				hi = lo
			}
			a, err1 := strconv.Atoi(lo)
			b, err2 := strconv.Atoi(hi)
			if err1 != nil || err2 != nil || slot < a || slot > b {
				continue
			}
			addr, _, _ := strings.Cut(f[1], "@")
			for i := range c.nodes {
				if addr == c.Addr(i) {
					return i
				}
			}
		}
	}
	c.t.Fatalf("no node serves slot %d", slot)
	return -1
}

func mustOK(t testing.TB, addr string, args ...string) {
	t.Helper()
	if out, err := command(addr, args...); err != nil || out != "OK" {
		t.Fatalf("%s %v: %q %v", addr, args, out, err)
	}
}

// command sends one command and reads a simple-string, error, integer or
// bulk-string reply: all the cluster set-up needs, without a client
// library in libs.
func command(addr string, args ...string) (string, error) {
	conn, err := (&net.Dialer{Timeout: 2 * time.Second}).DialContext(context.Background(), "tcp", addr)
	if err != nil {
		return "", err
	}
	defer func() { _ = conn.Close() }()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := conn.Write([]byte(b.String())); err != nil {
		return "", err
	}
	r := bufio.NewReader(conn)
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimSuffix(line, "\r\n")
	switch {
	case line == "":
		return "", fmt.Errorf("empty reply")
	case line[0] == '+' || line[0] == ':':
		return line[1:], nil
	case line[0] == '-':
		return "", fmt.Errorf("redis: %s", line[1:])
	case line[0] == '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return "", fmt.Errorf("bulk reply %q", line)
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	}
	return "", fmt.Errorf("unexpected reply %q", line)
}
