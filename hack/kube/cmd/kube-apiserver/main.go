// Command kube-apiserver is upstream's kube-apiserver (k8s.io/kubernetes
// v1.36.3, cmd/kube-apiserver) built from the Go module proxy for envtest and the
// e2e node (scripts/k8s-node).
// No release download site is reachable from CI, so scripts/install-envtest.sh
// builds this wrapper instead; the body mirrors upstream's apiserver.go.
//
// This module is deliberately not in go.work: it pins k8s.io/* staging
// modules at v0.36.3, which must not leak into the services' builds.
package main

import (
	"os"
	_ "time/tzdata" // time zone data for CronJob, as upstream

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	os.Exit(cli.Run(app.NewAPIServerCommand()))
}
