// Command kube-controller-manager is upstream's kube-controller-manager (k8s.io/kubernetes v1.36.3, cmd/kube-controller-manager),
// built from the Go module proxy for the e2e node (scripts/k8s-node): no
// release download site is reachable, so the body mirrors upstream's main.
package main

import (
	"os"
	_ "time/tzdata" // time zone data for CronJob, as upstream

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric
	"k8s.io/kubernetes/cmd/kube-controller-manager/app"
)

func main() {
	os.Exit(cli.Run(app.NewControllerManagerCommand()))
}
