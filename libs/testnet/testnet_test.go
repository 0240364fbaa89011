package testnet_test

import (
	"net"
	"strconv"
	"testing"

	"github.com/warmpath/warmpath/libs/testnet"
)

func TestFreeAddrIsBindable(t *testing.T) {
	ln, err := net.Listen("tcp", testnet.FreeAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	_ = ln.Close()
}

func TestPickAddrsAreDistinct(t *testing.T) {
	addrs, err := testnet.PickAddrs(t.Context(), 8)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, a := range addrs {
		if seen[a] {
			t.Fatalf("%s handed out twice in %v", a, addrs)
		}
		seen[a] = true
	}
}

// TestPortRunsDoNotOverlap: workers bind their ports only once started, so
// the runs handed out for one stack must not share a port even though none
// is bound yet (a worker of a `make demo` run once died on "address already
// in use" for a port probed twice).
func TestPortRunsDoNotOverlap(t *testing.T) {
	taken := map[int]bool{}
	seen := map[int]int{}
	for i := range 200 {
		base, err := testnet.PickPortRun(t.Context(), "127.0.0.1", 3, taken)
		if err != nil {
			t.Fatal(err)
		}
		for p := base; p < base+3; p++ {
			if j, dup := seen[p]; dup {
				t.Fatalf("port %d handed out to run %d and run %d", p, j, i)
			}
			seen[p] = i
		}
	}
}

func TestFreePortRunWithoutTakenSet(t *testing.T) {
	p := testnet.FreePortRun(t, 3, nil)
	for i := range 3 {
		ln, err := net.Listen("tcp", net.JoinHostPort("", strconv.Itoa(p+i)))
		if err != nil {
			t.Fatalf("port %d of the run %d..%d: %v", p+i, p, p+2, err)
		}
		_ = ln.Close()
	}
}
