# env.sh — the e2e node's settings, sourced by build.sh, up.sh and down.sh.
# Everything the node writes lives under $E2E_STATE and $E2E_RUN (plus the
# few places the kubelet and containerd hard-code, which down.sh cleans);
# the built binaries live under $E2E_CACHE, keyed by the pinned versions.
# Each setting may be overridden from the environment.

E2E_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# modver DIR MODULE: the version DIR/go.mod requires for MODULE.
modver() {
	awk -v m="$2" '($1 == m && $2 ~ /^v/) || ($1 == "require" && $2 == m) {
		print ($1 == "require") ? $3 : $2; exit }' "$1/go.mod"
}
KUBE_VERSION="$(modver "$E2E_ROOT/hack/kube" k8s.io/kubernetes)"
COREDNS_VERSION="$(modver "$E2E_ROOT/hack/coredns" github.com/coredns/coredns)"
# Prometheus with Kubernetes service discovery, for the e2e suite's
# dashboards check (Debian's build leaves that discovery out). Prometheus
# 3.16 is module version v0.316.0.
PROMETHEUS_VERSION="${PROMETHEUS_VERSION:-v0.316.0}"

E2E_CACHE="${E2E_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/warmpath/k8s-node/kube${KUBE_VERSION#v}-coredns${COREDNS_VERSION#v}}"
E2E_BIN="$E2E_CACHE/bin"
E2E_STATE="${E2E_STATE:-/var/lib/warmpath-e2e}" # etcd, containerd's images, certs, config, logs
E2E_RUN="${E2E_RUN:-/run/warmpath-e2e}"         # sockets, PIDs, runc and netns state
E2E_PKI="$E2E_STATE/pki"
E2E_ETC="$E2E_STATE/etc"
E2E_LOGS="$E2E_STATE/logs"
E2E_KUBECONFIG="$E2E_STATE/kubeconfig/admin.kubeconfig"

# The node's own addresses: an interface the harness creates, so every
# destination a test or a pod reaches is on this machine.
E2E_NODE="${E2E_NODE:-warmpath-e2e}"
E2E_IFACE="${E2E_IFACE:-wpe2e0}"
E2E_NODE_IP="${E2E_NODE_IP:-10.243.0.1}"
E2E_POD_CIDR="${E2E_POD_CIDR:-10.244.0.0/24}"
E2E_SVC_CIDR="${E2E_SVC_CIDR:-10.96.0.0/16}"
E2E_DNS_IP="${E2E_DNS_IP:-10.96.0.10}"
E2E_BRIDGE="${E2E_BRIDGE:-wpe2e-br0}"
E2E_CNI_CONF="/etc/cni/net.d/10-warmpath-e2e.conflist"
E2E_CTR_SOCK="$E2E_RUN/containerd/containerd.sock"

# Images of the node itself (FROM scratch, loaded without a registry).
E2E_PAUSE_IMAGE="warmpath.local/pause:e2e"
E2E_COREDNS_IMAGE="warmpath.local/coredns:${COREDNS_VERSION#v}"
E2E_CURL_IMAGE="warmpath.local/curl:e2e"

e2e_log() { printf '[%s %3ds] %s\n' "${E2E_STEP:-k8s-node}" "$SECONDS" "$*" >&2; }
e2e_need_root() {
	if [[ $(id -u) != 0 ]]; then
		e2e_log "needs root: it starts a kubelet and containerd and changes iptables"
		exit 1
	fi
}
# e2e_ctr ARGS...: ctr against the node's containerd, Kubernetes' namespace.
e2e_ctr() { ctr -a "$E2E_CTR_SOCK" -n k8s.io "$@"; }
# e2e_import_image REF...: Docker images into the node's containerd (there is
# no registry to pull from). Always imported: a rebuilt image keeps its tag.
e2e_import_image() {
	docker save "$@" | e2e_ctr images import - >/dev/null
	e2e_log "imported $*"
}
