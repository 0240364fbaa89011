package routerbench

import (
	"context"
	"strings"
	"time"

	"github.com/warmpath/warmpath/libs/testnet"
)

// StdlibPackage is the plain net/http/httputil.ReverseProxy the stdlib
// target runs, built when no binary is given.
const StdlibPackage = "github.com/warmpath/warmpath/tools/cmd/bench-stdproxy"

// StdlibConfig says how to run the stdlib proxy.
type StdlibConfig struct {
	// Bin is a bench-stdproxy binary; empty builds StdlibPackage into Dir.
	Bin string
	// Workers are the fake workers' base URLs, passed as --workers.
	Workers []string
	// Dir holds the built binary and the proxy's log.
	Dir string
	// ReadyTimeout bounds the wait for GET /ready to answer 200.
	ReadyTimeout time.Duration
}

// StartStdlib starts bench-stdproxy (building it first when c.Bin is empty)
// on a free loopback port in front of c.Workers and returns once GET /ready
// answers 200.
func StartStdlib(ctx context.Context, c StdlibConfig) (*Proxy, error) {
	bin, version := c.Bin, c.Bin
	if bin == "" {
		var err error
		if bin, err = goBuild(ctx, c.Dir, "bench-stdproxy", StdlibPackage, "--stdlib-bin"); err != nil {
			return nil, err
		}
		version = "go build " + StdlibPackage
	}
	listen, err := testnet.PickAddr(ctx)
	if err != nil {
		return nil, err
	}
	argv := []string{bin, "--listen", listen, "--workers", strings.Join(c.Workers, ",")}
	return startProxy(ctx, Stdlib, c.Dir, listen, version, argv, c.ReadyTimeout)
}
