package faults

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/warmpath/warmpath/libs/lmproto"
	"github.com/warmpath/warmpath/tests/harness"
)

const (
	cachePkg = "github.com/warmpath/warmpath/services/cacheserver/cmd/cacheserver"
	// lmPort and respPort are the cache server's lm:// and RESP ports in
	// its container; its HTTP (health, metrics) is on 8080.
	lmPort   = "65432"
	respPort = "6379"
)

// cacheArgs are the flags every cache server here gets, before its own.
func cacheArgs(extra ...string) []string {
	return append([]string{"--lm-listen", "0.0.0.0:" + lmPort, "--resp-listen", "0.0.0.0:" + respPort,
		"--http-listen", "0.0.0.0:8080", "--log-format", "text", "--log-level", "warn"}, extra...)
}

// startCache starts a cache server with lm:// and RESP published too.
func startCache(t *testing.T, s harness.Spec) *harness.Container {
	t.Helper()
	s.Package, s.Port, s.HealthPath = cachePkg, "8080", "/readyz"
	s.ExtraPorts = append(s.ExtraPorts, lmPort, respPort)
	return harness.Start(t, s)
}

// hostPort is where c's port is published, "host:port"; it fails the test
// on error.
func hostPort(t *testing.T, c *harness.Container, port string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	ep, err := c.Endpoint(ctx, port)
	if err != nil {
		t.Fatal(err)
	}
	return ep
}

// objValue is the known content of object i: 64 to 192 KiB of bytes from a
// generator seeded with i, so a read can be checked byte for byte.
func objValue(i int) []byte {
	r := rand.New(rand.NewPCG(uint64(i), 0x5eed)) //nolint:gosec // test content, not secrets
	b := make([]byte, 64<<10+r.IntN(128<<10))
	for j := 0; j+8 <= len(b); j += 8 {
		v := r.Uint64()
		for k := range 8 {
			b[j+k] = byte(v >> (8 * k))
		}
	}
	return b
}

func objKey(i int) string { return fmt.Sprintf("faults/obj-%06d", i) }

// objMeta is what object i is stored with; a read must give it back.
func objMeta(i int) lmproto.Meta {
	return lmproto.Meta{Fmt: 1, Dtype: int32(i % 7), Shape: [4]int32{2, int32(i), 16, 128}}
}

// metric reads base/metrics and returns the sample of name with exactly
// the labels given (e.g. `tier="disk"`; "" for none), and whether there was one.
func metric(ctx context.Context, base, name, labels string) (float64, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	b, err := harness.GetBody(ctx, base+"/metrics")
	if err != nil {
		return 0, false, err
	}
	want := name + " "
	if labels != "" {
		want = name + "{" + labels + "} "
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, want); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f, err == nil, err
		}
	}
	return 0, false, nil
}
func itoa(n int) string { return strconv.Itoa(n) }
