#!/usr/bin/env bash
# e2e.sh — the e2e suite (tests/e2e) on a real single-node Kubernetes
# cluster: build the node's binaries (cached), bring the node up, load the
# images `make images` built, run the suite, and tear the node down however
# the run ends (pass, fail, interrupt). Needs root and Docker.
#
#   E2E_TESTS='TestE2E/Traffic' a -run pattern for go test (not E2E_RUN: the
#                               node's scripts name their run directory so)
#   E2E_KEEP=1                  leave the node up afterwards (down.sh stops it)
set -euo pipefail
cd "$(dirname "$0")/.."
bin="$(scripts/k8s-node/build.sh)"
export PATH="$bin:$PATH"
if [[ ${E2E_KEEP:-0} != 1 ]]; then
	trap 'scripts/k8s-node/down.sh' EXIT
	trap 'exit 130' INT TERM
fi
kubeconfig="$(scripts/k8s-node/up.sh)"
scripts/k8s-node/load-images.sh
WARMPATH_E2E_KUBECONFIG="$kubeconfig" WARMPATH_E2E_PROMETHEUS="$bin/prometheus" \
	WARMPATH_E2E_PROMETHEUS_ADAPTER="$bin/prometheus-adapter" WARMPATH_REQUIRE_E2E=1 \
	go test -count=1 -timeout "${E2E_TIMEOUT:-25m}" ${E2E_TESTS:+-run "$E2E_TESTS"} -v ./tests/e2e/
