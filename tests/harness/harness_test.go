package harness_test

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/client"
	"github.com/redis/go-redis/v9"
	"github.com/testcontainers/testcontainers-go"

	"github.com/warmpath/warmpath/tests/harness"
)

const healthz = "github.com/warmpath/warmpath/tests/harness/internal/healthz"

func TestMain(m *testing.M) { harness.Main(m) }

func TestStart(t *testing.T) {
	// Two containers from one package: the second reuses the image.
	for _, arg := range []string{"first", "second"} {
		t.Run(arg, func(t *testing.T) {
			c := harness.Start(t, harness.Spec{
				Package:    healthz,
				Args:       []string{"--port", "9000", arg},
				Port:       "9000",
				HealthPath: "/health",
			})
			if got := get(t, c.URL+"/args"); !strings.Contains(got, arg) {
				t.Errorf("GET /args = %q, want it to contain %q", got, arg)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			logs, err := c.Logs(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(logs, "healthz listening") {
				t.Errorf("logs = %q, want the start-up line", logs)
			}
		})
	}
}

func TestImageIsCachedByContent(t *testing.T) {
	a := harness.Image(t, healthz, "9000")
	b := harness.Image(t, healthz, "9000")
	if a != b {
		t.Errorf("Image twice = %q, %q; want one tag", a, b)
	}
	if c := harness.Image(t, healthz, "9001"); c == a {
		t.Errorf("Image with another port = %q, want a different tag", c)
	}
}

func TestNetwork(t *testing.T) {
	var name string
	t.Run("containers reach each other by alias", func(t *testing.T) {
		nw := harness.NewNetwork(t)
		name = nw.Name
		peer := harness.Start(t, harness.Spec{
			Package:    healthz,
			Args:       []string{"--port", "9000", "peer-arg"},
			Port:       "9000",
			HealthPath: "/health",
			Network:    nw,
			Aliases:    []string{"peer"},
		})
		front := harness.Start(t, harness.Spec{
			Package:    healthz,
			Args:       []string{"--port", "9000", "front-arg"},
			Port:       "9000",
			HealthPath: "/health",
			Network:    nw,
		})
		fetch := front.URL + "/fetch?url=" + url.QueryEscape("http://peer:9000/args")
		if got := get(t, fetch); !strings.Contains(got, "peer-arg") {
			t.Errorf("GET http://peer:9000/args from front = %q, want peer's arguments", got)
		}

		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := peer.Stop(ctx, 0); err != nil {
			t.Fatal(err)
		}
		if status, body := getStatus(t, fetch); status == http.StatusOK {
			t.Errorf("GET http://peer:9000/args from front after Stop = %d %q, want an error", status, body)
		}
	})
	if name == "" {
		return // skipped: no Docker
	}
	// The subtest's cleanups terminated both containers, then the network.
	provider, err := testcontainers.NewDockerProvider()
	if err != nil {
		t.Fatal(err)
	}
	defer provider.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = provider.Client().NetworkInspect(ctx, name, client.NetworkInspectOptions{})
	if !errdefs.IsNotFound(err) {
		t.Errorf("network %s after the test: inspect err = %v, want not found", name, err)
	}
}

func TestAliasesNeedNetwork(t *testing.T) {
	ft := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		harness.Start(ft, harness.Spec{Package: healthz, Port: "9000", HealthPath: "/health", Aliases: []string{"x"}})
	}()
	<-done
	if !ft.fataled {
		t.Error("Start with Aliases and no Network did not fail")
	}
}

// fatalRecorder records Fatal instead of failing the real test; Start must
// fail before it touches Docker.
type fatalRecorder struct {
	testing.TB
	fataled bool
}

func (f *fatalRecorder) Helper() {}

func (f *fatalRecorder) Fatal(...any) {
	f.fataled = true
	runtime.Goexit()
}

func get(t *testing.T, u string) string {
	t.Helper()
	status, b := getStatus(t, u)
	if status != http.StatusOK {
		t.Fatalf("GET %s = %d %s", u, status, b)
	}
	return b
}

func getStatus(t *testing.T, u string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// TestHostImage runs Debian's redis-server from a FROM-scratch image of the
// host's own binary and libraries, and speaks RESP to it.
func TestHostImage(t *testing.T) {
	c := harness.Start(t, harness.Spec{
		Image:    harness.HostImage(t, "redis-server", "6379"),
		Args:     []string{"--port", "6379", "--save", "", "--appendonly", "no", "--protected-mode", "no"},
		Port:     "6379",
		ReadyLog: "Ready to accept connections",
	})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	addr, err := c.Endpoint(ctx, "6379")
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	reply, err := rdb.Ping(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if reply != "PONG" {
		t.Errorf("PING = %q, want PONG", reply)
	}
}
