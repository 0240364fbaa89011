// Command kubectl is upstream's kubectl (k8s.io/kubernetes v1.36.3, cmd/kubectl),
// built from the Go module proxy for the e2e node (scripts/k8s-node): no
// release download site is reachable, so the body mirrors upstream's main.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	"k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"
)

func main() {
	// Verbosity is set before the command is built, as upstream does, so
	// klog output while reading .kuberc honours -v.
	_, _ = logs.GlogSetter(cmd.GetLogVerbosity(os.Args))
	if err := cli.RunNoErrOutput(cmd.NewDefaultKubectlCommand()); err != nil {
		util.CheckErr(err)
	}
}
