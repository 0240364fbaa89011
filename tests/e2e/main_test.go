// Package e2e installs warmpath with `helm install` onto a real single-node
// Kubernetes cluster (scripts/k8s-node: a kubelet on containerd, kube-proxy,
// CoreDNS) and drives it as a user would: OpenAI traffic through the
// router's Service, live changes to the InferenceEndpointConfig, pod loss,
// L2 sharing, Prometheus over Kubernetes service discovery, `helm test`,
// `helm upgrade` and `helm uninstall`.
//
// `make test-e2e` (part of `make test`) builds and starts the cluster, loads
// the images and runs this package with WARMPATH_E2E_KUBECONFIG set; without
// it the suite skips, unless WARMPATH_REQUIRE_E2E=1 makes that a failure.
package e2e

import (
	"fmt"
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	if os.Getenv("WARMPATH_E2E_KUBECONFIG") == "" {
		if os.Getenv("WARMPATH_REQUIRE_E2E") == "1" {
			fmt.Fprintln(os.Stderr, "e2e: WARMPATH_E2E_KUBECONFIG is not set: run `make test-e2e`")
			os.Exit(1)
		}
		fmt.Fprintln(os.Stderr, "e2e: skipped: no cluster (WARMPATH_E2E_KUBECONFIG unset); `make test-e2e` brings one up")
	}
	os.Exit(m.Run())
}
