// Command etcd is upstream's etcd server (go.etcd.io/etcd/server/v3 v3.6.16)
// built from the Go module proxy for envtest. No release download site is
// reachable from CI, so scripts/install-envtest.sh builds this wrapper; like
// upstream's main.go it only hands the arguments to etcdmain.Main.
//
// This module is deliberately not in go.work: etcd's server dependencies
// must not leak into the services' builds.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
