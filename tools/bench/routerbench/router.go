package routerbench

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/warmpath/warmpath/libs/gobuild"
	"github.com/warmpath/warmpath/libs/testnet"
	"github.com/warmpath/warmpath/tools/bench/proc"
)

// RouterPackage is the router's main package, built when no binary is given.
const RouterPackage = "github.com/warmpath/warmpath/services/router/cmd/router"

// RouterConfig says how to run the router.
type RouterConfig struct {
	// Bin is a router binary; empty builds RouterPackage into Dir.
	Bin string
	// Strategy is passed as --strategy (prefixaware by default).
	Strategy string
	// Args are extra flags appended to the router's command line.
	Args []string
	// Workers are the fake workers' base URLs, passed as --workers.
	Workers []string
	// Dir holds the built binary and the router's log.
	Dir string
	// ReadyTimeout bounds the wait for GET /ready to answer 200.
	ReadyTimeout time.Duration
}

// BuildRouter builds RouterPackage into dir with the go command on PATH and
// returns the binary's path. It must run inside the warmpath workspace (the
// current directory or one below it holds go.work), as `make` and `go test`
// do; elsewhere pass a binary instead.
func BuildRouter(ctx context.Context, dir string) (string, error) {
	return goBuild(ctx, dir, "router", RouterPackage, "--router-bin")
}

// goBuild builds pkg into dir/name with the go command on PATH; flag names
// the option that passes a prebuilt binary instead.
func goBuild(ctx context.Context, dir, name, pkg, flag string) (string, error) {
	out := filepath.Join(dir, name)
	if err := gobuild.Build(ctx, "", pkg, out); err != nil {
		return "", fmt.Errorf("routerbench: build %s (or pass %s): %w", name, flag, err)
	}
	return out, nil
}

// StartRouter starts the router (building it first when c.Bin is empty) on
// a free loopback port in front of c.Workers and returns once GET /ready
// answers 200, which the router does after a health check has passed.
func StartRouter(ctx context.Context, c RouterConfig) (*Proxy, error) {
	bin, version := c.Bin, c.Bin
	if bin == "" {
		var err error
		if bin, err = BuildRouter(ctx, c.Dir); err != nil {
			return nil, err
		}
		version = "go build " + RouterPackage
	}
	listen, err := testnet.PickAddr(ctx)
	if err != nil {
		return nil, err
	}
	argv := []string{bin,
		"--listen", listen,
		"--workers", strings.Join(c.Workers, ","),
		"--strategy", c.Strategy,
		"--log-level", "warn",
	}
	argv = append(argv, c.Args...)
	return startProxy(ctx, "router", c.Dir, listen, version, argv, c.ReadyTimeout)
}

// startProxy runs a proxy process listening on listen and returns once its
// GET /ready answers 200 (within readyTimeout, 30s when zero).
func startProxy(ctx context.Context, name, dir, listen, version string, argv []string, readyTimeout time.Duration) (*Proxy, error) {
	child, err := proc.Start(name, dir, argv, nil)
	if err != nil {
		return nil, err
	}
	p := &Proxy{Name: name, URL: "http://" + listen, Version: version, proc: child}
	if readyTimeout <= 0 {
		readyTimeout = 30 * time.Second
	}
	if err := child.WaitReady(ctx, p.URL+"/ready", readyTimeout); err != nil {
		_ = p.Stop(5 * time.Second)
		return nil, fmt.Errorf("routerbench: %w", err)
	}
	return p, nil
}
