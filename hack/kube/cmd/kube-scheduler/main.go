// Command kube-scheduler is upstream's kube-scheduler (k8s.io/kubernetes v1.36.3, cmd/kube-scheduler),
// built from the Go module proxy for the e2e node (scripts/k8s-node): no
// release download site is reachable, so the body mirrors upstream's main.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
)

func main() {
	os.Exit(cli.Run(app.NewSchedulerCommand()))
}
