// Command coredns is CoreDNS (github.com/coredns/coredns, pinned in go.mod)
// built from the Go module proxy for the e2e node's cluster DNS, with only
// the plugins its Corefile (scripts/k8s-node/manifests/coredns.yaml) uses:
// the cloud back-ends and the forwarder stay out of the build, which keeps
// it short and keeps pods from resolving anything beyond the cluster.
//
// This module is not in go.work: its pins must not leak into the services.
package main

import (
	_ "github.com/coredns/coredns/core/dnsserver" // the server type the plugins attach to
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/metrics"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

func main() { coremain.Run() }
