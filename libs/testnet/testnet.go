// Package testnet picks free TCP ports for tests and benchmarks that start
// servers whose addresses must be known before they bind them (a peer's
// address in another's flags, a worker's event ports after its HTTP port).
//
// A port is free when it was picked, not when it is used: another process
// may take it in between, and the server then fails to start and says so.
// Callers that pick several ports before starting anything keep them
// distinct with PickAddrs or a taken set.
package testnet

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"testing"
)

// PickAddr returns a loopback address ("127.0.0.1:port") whose port was
// free a moment ago.
func PickAddr(ctx context.Context) (string, error) {
	a, err := pick(ctx)
	if err != nil {
		return "", err
	}
	return a.String(), nil
}

// pick binds a loopback port the kernel chooses and lets it go again.
func pick(ctx context.Context) (*net.TCPAddr, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("testnet: find a free port: %w", err)
	}
	a := ln.Addr().(*net.TCPAddr)
	if err := ln.Close(); err != nil {
		return nil, fmt.Errorf("testnet: find a free port: %w", err)
	}
	return a, nil
}

// PickAddrs returns n distinct loopback addresses free now: each listener
// is held until all are chosen, so none is handed out twice.
func PickAddrs(ctx context.Context, n int) ([]string, error) {
	var lc net.ListenConfig
	addrs := make([]string, 0, n)
	for range n {
		ln, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("testnet: find %d free ports: %w", n, err)
		}
		defer func() { _ = ln.Close() }()
		addrs = append(addrs, ln.Addr().String())
	}
	return addrs, nil
}

// PickPortRun returns a port p with p..p+n-1 free on host ("" for every
// interface) and none of them in taken, which it adds them to when taken
// is not nil: a simulated worker's HTTP port and, after it, its KV-event
// and replay ports. As servers bind only once started, a caller picking
// several runs first passes one taken set to all of them, or two runs may
// share a port that nothing held when the second was picked.
func PickPortRun(ctx context.Context, host string, n int, taken map[int]bool) (int, error) {
	var lc net.ListenConfig
	for range 50 {
		ln, err := lc.Listen(ctx, "tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return 0, fmt.Errorf("testnet: find free ports: %w", err)
		}
		base := ln.Addr().(*net.TCPAddr).Port
		_ = ln.Close()
		if base+n >= 1<<16 {
			continue
		}
		ok := true
		for p := base; ok && p < base+n; p++ {
			ok = !taken[p]
		}
		for p := base + 1; ok && p < base+n; p++ {
			l, err := lc.Listen(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(p)))
			if err != nil {
				ok = false
				break
			}
			_ = l.Close()
		}
		if !ok {
			continue
		}
		if taken != nil {
			for p := base; p < base+n; p++ {
				taken[p] = true
			}
		}
		return base, nil
	}
	return 0, fmt.Errorf("testnet: no run of %d free ports", n)
}

// FreeAddr is PickAddr for a test, which it fails on an error.
func FreeAddr(t testing.TB) string {
	t.Helper()
	addr, err := PickAddr(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// FreePort is PickAddr's port for a test, which it fails on an error.
func FreePort(t testing.TB) int {
	t.Helper()
	a, err := pick(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return a.Port
}

// FreePortRun is PickPortRun on every interface for a test, which it fails
// on an error.
func FreePortRun(t testing.TB, n int, taken map[int]bool) int {
	t.Helper()
	p, err := PickPortRun(t.Context(), "", n, taken)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
