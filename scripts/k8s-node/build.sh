#!/usr/bin/env bash
# build.sh — everything the e2e node needs, from Debian's packages and the Go
# module proxy only (no release download site and no registry is reachable):
#
#   apt       containerd, runc, containernetworking-plugins (/usr/lib/cni),
#             iptables, nftables, iproute2, openssl
#   envtest   kube-apiserver and etcd: scripts/install-envtest.sh's build,
#             reused as is
#   hack/kube kubelet, kube-controller-manager, kube-scheduler, kube-proxy,
#             kubectl (the same module and pins as envtest's kube-apiserver, so
#             they share its build cache), pause (the sandbox image) and a
#             curl stand-in for the chart's `helm test` pod
#   hack/coredns  CoreDNS with the cluster-DNS plugins only
#   tests     helm, from the tests module's own helm.sh/helm/v3 pin (a `tool`
#             in tests/go.mod), so it shares the chart tests' build cache
#   prometheus  Prometheus $PROMETHEUS_VERSION (go install, pinned by version and
#             checked against the Go checksum database) with only its Kubernetes
#             service discovery (build tags remove_all_sd,enable_kubernetes_sd):
#             Debian's prometheus package is built without it
#   hack/prometheus-adapter  prometheus-adapter, serving custom.metrics.k8s.io
#             from Prometheus to the node's HPA controller
#   docker    FROM-scratch images of pause, CoreDNS and the curl stand-in
#
# Binaries go to $E2E_CACHE/bin (keyed by the pinned versions) and are kept:
# a run that finds one reporting the pinned version skips it. Prints the bin
# directory on stdout. Cold on an idle 2-core machine: see docs/development.md.
set -euo pipefail
E2E_STEP=build
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
ROOT="$E2E_ROOT"

if [[ $(id -u) == 0 ]]; then
	need=()
	for p in containerd runc containernetworking-plugins iptables nftables iproute2 openssl; do
		dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
	done
	if ((${#need[@]})); then
		e2e_log "apt-get install ${need[*]}"
		apt-get update -qq >&2
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >&2
	fi
fi

mkdir -p "$E2E_BIN"
envtest="$("$ROOT/scripts/install-envtest.sh")"
for n in kube-apiserver etcd; do
	cmp -s "$envtest/$n" "$E2E_BIN/$n" || cp "$envtest/$n" "$E2E_BIN/$n"
done

export CGO_ENABLED=0 GOWORK=off GOFLAGS=-mod=readonly
vpkg=k8s.io/component-base/version
minor="${KUBE_VERSION#v*.}"
minor="${minor%%.*}"
major="${KUBE_VERSION#v}"
major="${major%%.*}"
kube_ldflags="-s -w -X $vpkg.gitVersion=$KUBE_VERSION -X $vpkg.gitMajor=$major -X $vpkg.gitMinor=$minor -X $vpkg.gitTreeState=clean"

# build DIR PKG NAME LDFLAGS: go build unless $E2E_BIN/NAME is current.
# Upstream binaries are current when they report the pinned version; the
# project's own small ones are rebuilt every time (seconds, from the cache).
build() {
	local dir="$1" pkg="$2" name="$3" ldflags="$4" t=$SECONDS
	(cd "$dir" && go build -trimpath -buildvcs=false -ldflags "$ldflags" -o "$E2E_BIN/.$name.tmp" "$pkg")
	mv "$E2E_BIN/.$name.tmp" "$E2E_BIN/$name"
	e2e_log "built $name in $((SECONDS - t))s"
}
have() { # have NAME VERSION [ARGS...]: the binary's first line for ARGS (--version) starts with VERSION
	local bin="$E2E_BIN/$1" want="$2" out
	shift 2
	(($#)) || set -- --version
	[[ -x $bin ]] && out="$("$bin" "$@" 2>/dev/null)" && [[ ${out%%$'\n'*} == "$want"* ]]
}
for n in kubelet kube-controller-manager kube-scheduler kube-proxy; do
	have "$n" "Kubernetes $KUBE_VERSION" || build "$ROOT/hack/kube" "./cmd/$n" "$n" "$kube_ldflags"
done
have kubectl "Client Version: $KUBE_VERSION" version --client ||
	build "$ROOT/hack/kube" ./cmd/kubectl kubectl "$kube_ldflags"
build "$ROOT/hack/kube" ./cmd/pause pause "-s -w"
# Not named curl here, where it would shadow the real one on PATH.
build "$ROOT/hack/kube" ./cmd/curl curl-standin "-s -w"
have coredns "CoreDNS-${COREDNS_VERSION#v}" -version ||
	build "$ROOT/hack/coredns" . coredns "-s -w"
helm_version="$(modver "$ROOT/tests" helm.sh/helm/v3)"
have helm "version.BuildInfo{Version:\"$helm_version\"" version ||
	GOWORK= build "$ROOT/tests" helm.sh/helm/v3/cmd/helm helm "-s -w -X helm.sh/helm/v3/internal/version.version=$helm_version"

# go install stamps no version into Prometheus: a file beside it says which.
if [[ ! -x $E2E_BIN/prometheus || "$(cat "$E2E_BIN/prometheus.version" 2>/dev/null)" != "$PROMETHEUS_VERSION" ]]; then
	t=$SECONDS
	GOBIN="$E2E_BIN" GOFLAGS= go install -trimpath -ldflags "-s -w" -tags remove_all_sd,enable_kubernetes_sd \
		"github.com/prometheus/prometheus/cmd/prometheus@$PROMETHEUS_VERSION"
	echo "$PROMETHEUS_VERSION" >"$E2E_BIN/prometheus.version"
	e2e_log "built prometheus in $((SECONDS - t))s"
fi

# prometheus-adapter, the metrics adapter the e2e's HPA reads through: its
# module cannot be go-installed by version (the proxy refuses its version
# list, which go install reads for deprecations), so hack/ pins it as a tool.
# It stamps no version either: a file beside it says which.
adapter_version="$(modver "$ROOT/hack/prometheus-adapter" sigs.k8s.io/prometheus-adapter)"
if [[ ! -x $E2E_BIN/prometheus-adapter || "$(cat "$E2E_BIN/prometheus-adapter.version" 2>/dev/null)" != "$adapter_version" ]]; then
	GOWORK=off build "$ROOT/hack/prometheus-adapter" sigs.k8s.io/prometheus-adapter/cmd/adapter prometheus-adapter "-s -w"
	echo "$adapter_version" >"$E2E_BIN/prometheus-adapter.version"
fi

# FROM-scratch images for the node. docker build's own cache makes an
# unchanged one instant.
image() { # image TAG BINARY NAME [USER]: BINARY as /usr/bin/NAME
	local ctx
	ctx="$(mktemp -d)"
	mkdir -p "$ctx/usr/bin"
	cp "$E2E_BIN/$2" "$ctx/usr/bin/$3"
	{
		echo "FROM scratch"
		echo "COPY usr /usr"
		[[ -n ${4:-} ]] && echo "USER $4"
		echo "ENTRYPOINT [\"/usr/bin/$3\"]"
	} >"$ctx/Dockerfile"
	local out
	if ! out="$(docker build -q -t "$1" "$ctx" 2>&1)"; then
		echo "$out" >&2
		rm -rf "$ctx"
		return 1
	fi
	rm -rf "$ctx"
}
image "$E2E_PAUSE_IMAGE" pause pause 65535:65535
# CoreDNS is root in its image; the Deployment drops every capability but
# NET_BIND_SERVICE, which port 53 needs.
image "$E2E_COREDNS_IMAGE" coredns coredns
image "$E2E_CURL_IMAGE" curl-standin curl 65532:65532
e2e_log "images $E2E_PAUSE_IMAGE $E2E_COREDNS_IMAGE $E2E_CURL_IMAGE"
echo "$E2E_BIN"
