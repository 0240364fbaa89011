package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dockercontainer "github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	dockernetwork "github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	tclog "github.com/testcontainers/testcontainers-go/log"
	"github.com/testcontainers/testcontainers-go/network"
	"github.com/testcontainers/testcontainers-go/wait"
)

// Spec describes one container to start from a workspace main package.
type Spec struct {
	// Package is the main package's import path,
	// e.g. "github.com/warmpath/warmpath/tools/cmd/vllm-sim".
	Package string
	// Image is a tag to run instead of Package's image, e.g. HostImage's.
	Image string
	// Args are the binary's arguments (the image's entrypoint is the binary).
	Args []string
	// Env is added to the container's environment.
	Env map[string]string
	// Port is the container port the binary listens on, e.g. "8000".
	Port string
	// HealthPath is polled over HTTP until it answers 200, e.g. "/health".
	HealthPath string
	// ReadyLog, for a peer that speaks no HTTP (Redis), is a line its log
	// prints once it serves, e.g. "Ready to accept connections"; the wait
	// is for it when HealthPath is empty. (Docker's port proxy accepts
	// connections before the process listens, so a port that accepts
	// proves nothing.)
	ReadyLog string
	// StartupTimeout bounds the wait for HealthPath; default 60s.
	StartupTimeout time.Duration
	// Network, when set, is the user-defined network the container joins
	// instead of the default bridge; see NewNetwork.
	Network *Network
	// Aliases are the container's host names on Network, e.g. "sim-a";
	// they need Network.
	Aliases []string
	// ExtraPorts are container ports published besides Port, e.g. "65432"
	// for a protocol other than HTTP; Container.Endpoint finds them.
	ExtraPorts []string
	// Mounts bind host directories into the container: host path to
	// container path. The images run as uid 65534, so a directory the
	// binary writes must be writable by it (see WritableDir). The mounts
	// outlive Kill and Restart: a restarted container sees what it wrote.
	Mounts map[string]string
}

// Container is a started container. It is terminated when the test that
// started it ends; if the test failed, its logs are written to the test log.
type Container struct {
	// URL is the base URL of Spec.Port as seen from the test process,
	// e.g. "http://localhost:32771", with no trailing slash.
	URL string

	ctr     *testcontainers.DockerContainer
	port    string // Spec.Port with its protocol, e.g. "8000/tcp"
	nw      *Network
	aliases []string
}

// Start builds (or reuses) the image for s.Package, or takes s.Image,
// starts a container from it and waits until s.HealthPath answers 200 (or
// its log prints s.ReadyLog). It fails the test on error.
func Start(t testing.TB, s Spec) *Container {
	t.Helper()
	if s.Port == "" || (s.Package == "") == (s.Image == "") || (s.HealthPath == "") == (s.ReadyLog == "") {
		t.Fatal("harness: Spec needs Port, one of Package and Image, and one of HealthPath and ReadyLog")
	}
	if len(s.Aliases) > 0 && s.Network == nil {
		t.Fatal("harness: Spec.Aliases need a Spec.Network")
	}
	if s.StartupTimeout == 0 {
		s.StartupTimeout = 60 * time.Second
	}
	img := s.Image
	if img == "" {
		img = Image(t, s.Package, s.Port)
	}
	port := s.Port + "/tcp"
	var ready wait.Strategy = wait.ForLog(s.ReadyLog).
		WithStartupTimeout(s.StartupTimeout).WithPollInterval(100 * time.Millisecond)
	if s.HealthPath != "" {
		ready = wait.ForHTTP(s.HealthPath).
			WithPort(port).
			WithStatusCodeMatcher(func(status int) bool { return status == http.StatusOK }).
			WithStartupTimeout(s.StartupTimeout).
			WithPollInterval(100 * time.Millisecond)
	}

	ctx, cancel := context.WithTimeout(context.Background(), s.StartupTimeout+30*time.Second)
	defer cancel()
	opts := []testcontainers.ContainerCustomizer{
		// testcontainers' progress lines go to the test log, shown with -v
		// or on failure.
		testcontainers.WithLogger(tclog.TestLogger(t)),
		testcontainers.WithExposedPorts(append([]string{port}, extraPorts(s.ExtraPorts)...)...),
		testcontainers.WithCmd(s.Args...),
		testcontainers.WithEnv(s.Env),
		testcontainers.WithLabels(map[string]string{LabelTest: "true"}),
		testcontainers.WithWaitStrategy(ready),
	}
	if s.Network != nil {
		opts = append(opts, network.WithNetwork(s.Aliases, s.Network.nw))
	}
	if len(s.Mounts) > 0 {
		opts = append(opts, testcontainers.WithHostConfigModifier(func(hc *dockercontainer.HostConfig) {
			for host, ctr := range s.Mounts {
				hc.Mounts = append(hc.Mounts, mount.Mount{Type: mount.TypeBind, Source: host, Target: ctr})
			}
		}))
	}
	ctr, err := testcontainers.Run(ctx, img, opts...)
	// Register termination before checking err: a container that started
	// but never became healthy must still go away.
	testcontainers.CleanupContainer(t, ctr)
	if ctr != nil {
		// Cleanups run last-in first-out: logs are read before termination.
		t.Cleanup(func() {
			if t.Failed() {
				dumpLogs(t, ctr)
			}
		})
	}
	if err != nil {
		t.Fatalf("harness: start %s %s: %v", img, strings.Join(s.Args, " "), err)
	}
	url, err := ctr.PortEndpoint(ctx, port, "http")
	if err != nil {
		t.Fatalf("harness: endpoint of %s: %v", img, err)
	}
	return &Container{URL: url, ctr: ctr, port: port, nw: s.Network, aliases: s.Aliases}
}

func extraPorts(ports []string) []string {
	out := make([]string, len(ports))
	for i, p := range ports {
		out[i] = p + "/tcp"
	}
	return out
}

// WritableDir returns a new directory under t.TempDir that the images' user
// (uid 65534) can write, for Spec.Mounts. The test process must be able to
// remove what the container writes there, as root can.
func WritableDir(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatalf("harness: %v", err)
	}
	// 0o777 rather than a chown: it works whoever runs the tests.
	if err := os.Chmod(dir, 0o777); err != nil { //nolint:gosec // a test's scratch directory, written by a container
		t.Fatalf("harness: %v", err)
	}
	return dir
}

// Endpoint returns "host:port" where the container's port (one of Port or
// ExtraPorts, e.g. "65432") is published. Docker may publish it elsewhere
// after a Restart: call Endpoint again then.
func (c *Container) Endpoint(ctx context.Context, port string) (string, error) {
	ep, err := c.ctr.PortEndpoint(ctx, port+"/tcp", "")
	if err != nil {
		return "", fmt.Errorf("harness: endpoint of %s: %w", port, err)
	}
	return ep, nil
}

// Stop stops the container, as a crashed or drained worker would: it gets
// SIGTERM, then SIGKILL after grace (whole seconds; 0 kills at once). Its
// aliases stop resolving on its network. The test's cleanup still removes
// it, and Logs works until then.
func (c *Container) Stop(ctx context.Context, grace time.Duration) error {
	if err := c.ctr.Stop(ctx, &grace); err != nil {
		return fmt.Errorf("harness: stop: %w", err)
	}
	return nil
}

// Logs returns the container's stdout and stderr so far.
func (c *Container) Logs(ctx context.Context) (string, error) {
	rc, err := c.ctr.Logs(ctx)
	if err != nil {
		return "", fmt.Errorf("harness: logs: %w", err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return "", fmt.Errorf("harness: logs: %w", err)
	}
	return string(b), nil
}

func dumpLogs(t testing.TB, ctr *testcontainers.DockerContainer) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	logs, err := (&Container{ctr: ctr}).Logs(ctx)
	if err != nil {
		t.Logf("container %s: %v", ctr.GetContainerID(), err)
		return
	}
	const maxLog = 64 << 10
	if len(logs) > maxLog {
		logs = "...\n" + logs[len(logs)-maxLog:]
	}
	t.Logf("container %s logs:\n%s", ctr.GetContainerID(), logs)
}

// Kill sends the container SIGKILL, as `docker kill` does: the process dies
// at once, as a crashed worker would, without the SIGTERM that Stop sends
// first. The test's cleanup still removes it.
func (c *Container) Kill(ctx context.Context) error {
	return c.docker(ctx, "kill", func(cli *testcontainers.DockerClient, id string) error {
		_, err := cli.ContainerKill(ctx, id, client.ContainerKillOptions{Signal: "SIGKILL"})
		return err
	})
}

// Pause freezes every process of the container, as `docker pause` does: its
// sockets stay open and the kernel still accepts connections for it, but
// nothing answers, as a hung worker would. Unpause thaws it.
func (c *Container) Pause(ctx context.Context) error {
	return c.docker(ctx, "pause", func(cli *testcontainers.DockerClient, id string) error {
		_, err := cli.ContainerPause(ctx, id, client.ContainerPauseOptions{})
		return err
	})
}

// Unpause thaws a container Pause froze.
func (c *Container) Unpause(ctx context.Context) error {
	return c.docker(ctx, "unpause", func(cli *testcontainers.DockerClient, id string) error {
		_, err := cli.ContainerUnpause(ctx, id, client.ContainerUnpauseOptions{})
		return err
	})
}

// Restart restarts the container, as `docker restart` does: SIGTERM, then
// SIGKILL after grace (whole seconds), then the same command again. It
// returns once the container runs, not once it is healthy. Docker may
// publish its port on another host port: the returned URL is the new
// Spec.Port base URL; c.URL is not changed, since other goroutines may be
// reading it.
func (c *Container) Restart(ctx context.Context, grace time.Duration) (string, error) {
	secs := int(grace.Seconds())
	err := c.docker(ctx, "restart", func(cli *testcontainers.DockerClient, id string) error {
		_, err := cli.ContainerRestart(ctx, id, client.ContainerRestartOptions{Timeout: &secs})
		return err
	})
	if err != nil {
		return "", err
	}
	url, err := c.ctr.PortEndpoint(ctx, c.port, "http")
	if err != nil {
		return "", fmt.Errorf("harness: endpoint after restart: %w", err)
	}
	return url, nil
}

// docker runs op with a Docker client and the container's id.
func (c *Container) docker(ctx context.Context, what string, op func(*testcontainers.DockerClient, string) error) error {
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		return fmt.Errorf("harness: %s: %w", what, err)
	}
	defer cli.Close()
	if err := op(cli, c.ctr.GetContainerID()); err != nil {
		return fmt.Errorf("harness: %s: %w", what, err)
	}
	return nil
}

// Disconnect takes the container off its Spec.Network, as `docker network
// disconnect` does: its peers there can no longer reach it nor resolve its
// aliases, and its connections to them stall; it keeps running and stays
// reachable from the test through its published ports. Reconnect undoes it.
func (c *Container) Disconnect(ctx context.Context) error {
	if c.nw == nil {
		return errors.New("harness: disconnect: the container has no Spec.Network")
	}
	return c.docker(ctx, "network disconnect", func(cli *testcontainers.DockerClient, id string) error {
		_, err := cli.NetworkDisconnect(ctx, c.nw.nw.ID, client.NetworkDisconnectOptions{Container: id, Force: true})
		return err
	})
}

// Reconnect puts a container Disconnect took off its network back on it,
// under the same aliases (its address may change).
func (c *Container) Reconnect(ctx context.Context) error {
	if c.nw == nil {
		return errors.New("harness: reconnect: the container has no Spec.Network")
	}
	return c.docker(ctx, "network connect", func(cli *testcontainers.DockerClient, id string) error {
		_, err := cli.NetworkConnect(ctx, c.nw.nw.ID, client.NetworkConnectOptions{Container: id,
			EndpointConfig: &dockernetwork.EndpointSettings{Aliases: c.aliases}})
		return err
	})
}

// MemoryBytes is the container's memory in use now, as `docker stats`
// shows it: the cgroup's usage less its inactive page cache.
func (c *Container) MemoryBytes(ctx context.Context) (uint64, error) {
	var used uint64
	err := c.docker(ctx, "stats", func(cli *testcontainers.DockerClient, id string) error {
		res, err := cli.ContainerStats(ctx, id, client.ContainerStatsOptions{})
		if err != nil {
			return err
		}
		defer res.Body.Close()
		var st dockercontainer.StatsResponse
		if err := json.NewDecoder(res.Body).Decode(&st); err != nil {
			return err
		}
		used = st.MemoryStats.Usage
		if cache := st.MemoryStats.Stats["inactive_file"]; cache < used {
			used -= cache
		}
		return nil
	})
	return used, err
}
