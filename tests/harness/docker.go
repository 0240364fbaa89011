package harness

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
)

var (
	dockerOnce sync.Once
	dockerErr  error
)

// RequireDocker skips the test when no Docker daemon answers, or fails it
// when EnvRequireDocker is "1" (as under `make test-integration`).
func RequireDocker(t testing.TB) {
	t.Helper()
	dockerOnce.Do(func() {
		// testcontainers panics in some set-ups without a daemon.
		defer func() {
			if r := recover(); r != nil {
				dockerErr = fmt.Errorf("docker provider panicked: %v", r)
			}
		}()
		provider, err := testcontainers.NewDockerProvider()
		if err != nil {
			dockerErr = err
			return
		}
		defer provider.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if dockerErr = provider.Health(ctx); dockerErr == nil {
			useLoopbackIfLocal(ctx, provider)
		}
	})
	if dockerErr == nil {
		return
	}
	if os.Getenv(EnvRequireDocker) == "1" {
		t.Fatalf("harness: Docker is required (%s=1) but not reachable: %v", EnvRequireDocker, dockerErr)
	}
	t.Skipf("harness: Docker is not reachable: %v", dockerErr)
}

// envHostOverride is testcontainers' setting for the host that published
// container ports are reached on.
const envHostOverride = "TESTCONTAINERS_HOST_OVERRIDE"

// useLoopbackIfLocal points testcontainers at localhost when the daemon
// shares this machine's network namespace.
//
// Inside a container (/.dockerenv exists), testcontainers reaches published
// ports through the bridge network's gateway, or the default route's gateway
// when the bridge reports none, as some daemons do. On a machine that runs
// its own daemon that gateway is not the daemon's host and every wait times
// out. A local interface address inside the bridge subnet proves the daemon
// is local, and then localhost reaches its published ports.
func useLoopbackIfLocal(ctx context.Context, provider *testcontainers.DockerProvider) {
	if _, set := os.LookupEnv(envHostOverride); set {
		return
	}
	cli := provider.Client()
	if u, err := url.Parse(cli.DaemonHost()); err != nil || u.Scheme != "unix" {
		return
	}
	bridge, err := cli.NetworkInspect(ctx, "bridge", client.NetworkInspectOptions{})
	if err != nil {
		return
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return
	}
	for _, cfg := range bridge.Network.IPAM.Config {
		for _, a := range addrs {
			ipnet, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			ip, ok := netip.AddrFromSlice(ipnet.IP)
			if ok && cfg.Subnet.IsValid() && cfg.Subnet.Contains(ip.Unmap()) {
				_ = os.Setenv(envHostOverride, "localhost")
				return
			}
		}
	}
}
