#!/usr/bin/env bash
# up.sh — a real single-node Kubernetes cluster on this machine, for the e2e
# suite (tests/e2e): etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, a kubelet on Debian's containerd and runc with the CNI
# bridge, kube-proxy (iptables) and CoreDNS, from build.sh's binaries.
#
#   scripts/k8s-node/up.sh      # ~30 s once built; prints the kubeconfig path
#   scripts/k8s-node/down.sh    # stops it and restores the machine
#
# A failure on the way up tears down what was started (down.sh) and exits 1.
# A node left behind by a killed run is torn down first.
#
# What this machine needs, and why (each found on a real run):
#  * kubelet >= 1.35 refuses cgroup v1 unless failCgroupV1 is false.
#  * Debian's containerd 1.6 has no CRI RuntimeConfig: the kubelet falls back
#    to its own cgroupDriver (cgroupfs) and logs an error line saying so.
#  * root here lacks CAP_SYS_RESOURCE, so nothing may lower oom_score_adj:
#    containerd's restrict_oom_score_adj, and oomScoreAdj 0 for the kubelet
#    and kube-proxy, or runc fails every sandbox ("can't get final child's
#    PID from pipe: EOF").
#  * no registry: the sandbox image is the FROM-scratch pause of build.sh,
#    every image is imported with `docker save | ctr import`, and the
#    kubelet never garbage-collects images (it could not pull them back).
#  * Docker sets iptables' FORWARD policy to DROP: the CNI chain adds the
#    firewall plugin, which accepts the pods' traffic.
#  * the kubelet sets vm.overcommit_memory=1, kernel.panic=10 and
#    kernel.panic_on_oops=1 with no opt-out: saved here, restored by down.sh.
#  * pods get no default route (only the Service range and the node's
#    address) and CoreDNS no upstream: nothing in a pod reaches beyond
#    this machine.
set -euo pipefail
E2E_STEP=up
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$HERE/env.sh"
e2e_need_root
export PATH="$E2E_BIN:$PATH" KUBECONFIG="$E2E_KUBECONFIG"
for b in etcd kube-apiserver kubelet kube-controller-manager kube-scheduler kube-proxy kubectl; do
	[[ -x $E2E_BIN/$b ]] || { e2e_log "$E2E_BIN/$b is missing: run scripts/k8s-node/build.sh"; exit 1; }
done

if [[ -d $E2E_RUN || -d $E2E_STATE/saved ]]; then
	e2e_log "a node is left from an earlier run: tearing it down first"
	"$HERE/down.sh"
fi
failed() {
	local rc=$?
	e2e_log "bring-up failed (exit $rc); the last lines of each log:"
	for f in "$E2E_LOGS"/*.log; do
		[[ -f $f ]] && { echo "--- $f" >&2; tail -n 15 "$f" >&2; }
	done
	"$HERE/down.sh" >&2 || true
	exit 1
}
trap failed ERR
trap 'e2e_log interrupted; "$HERE/down.sh" >&2; exit 130' INT TERM

mkdir -p "$E2E_RUN/pids" "$E2E_STATE/saved" "$E2E_ETC" "$E2E_LOGS" "$(dirname "$E2E_KUBECONFIG")"

# --- what the node changes, saved before it does (down.sh restores it)
for s in vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops \
	kernel.keys.root_maxkeys kernel.keys.root_maxbytes net.ipv4.conf.all.route_localnet \
	net.ipv4.ip_forward net.bridge.bridge-nf-call-iptables; do
	v="$(sysctl -n "$s" 2>/dev/null)" && echo "$s=$v"
done >"$E2E_STATE/saved/sysctl"
# iptables-nft creates tables on first use; down.sh drops the new, empty ones.
nft list tables >"$E2E_STATE/saved/nft-tables"
[[ -e /var/log/containers ]] || touch "$E2E_STATE/saved/made-var-log-containers"
[[ -e /etc/cni ]] || touch "$E2E_STATE/saved/made-etc-cni"
[[ -e /run/containerd ]] || touch "$E2E_STATE/saved/made-run-containerd"

# start NAME CMD...: CMD in its own session, logged to logs/NAME.log, its PID
# recorded for down.sh.
start() {
	local n="$1"
	shift
	setsid "$@" >"$E2E_LOGS/$n.log" 2>&1 </dev/null &
	echo $! >"$E2E_RUN/pids/$n.pid"
	e2e_log "started $n (pid $!)"
}
# wait_for WHAT SECONDS CMD...: poll CMD every half second until it succeeds.
wait_for() {
	local what="$1" max=$(($2 * 2))
	shift 2
	for ((i = 0; i < max; i++)); do
		if "$@" >/dev/null 2>&1; then
			e2e_log "$what ready"
			return 0
		fi
		sleep 0.5
	done
	e2e_log "timed out after $((max / 2))s waiting for $what"
	return 1
}

# --- the node's address, on an interface of its own: a bridge with no
# ports (this VM's kernel has no dummy interfaces), whose address is local
# like any other.
ip link add "$E2E_IFACE" type bridge
ip addr add "$E2E_NODE_IP/32" dev "$E2E_IFACE"
ip link set "$E2E_IFACE" up
sysctl -q -w net.ipv4.ip_forward=1
modprobe br_netfilter 2>/dev/null || true

# --- certificates and kubeconfigs
E2E_SVC_CIDR="$E2E_SVC_CIDR" "$HERE/pki.sh" "$E2E_PKI" "$E2E_NODE" "$E2E_NODE_IP"
kubeconfig() { # kubeconfig NAME CERT
	cat >"$(dirname "$E2E_KUBECONFIG")/$1.kubeconfig" <<KCF
apiVersion: v1
kind: Config
clusters:
- name: warmpath-e2e
  cluster: {server: "https://$E2E_NODE_IP:6443", certificate-authority: $E2E_PKI/ca.crt}
users:
- name: $1
  user: {client-certificate: $E2E_PKI/$2.crt, client-key: $E2E_PKI/$2.key}
contexts:
- name: warmpath-e2e
  context: {cluster: warmpath-e2e, user: $1}
current-context: warmpath-e2e
KCF
}
for c in admin controller-manager scheduler kube-proxy kubelet; do kubeconfig "$c" "$c"; done
KC="$(dirname "$E2E_KUBECONFIG")"

# --- etcd (envtest's build)
start etcd "$E2E_BIN/etcd" --name warmpath-e2e --data-dir "$E2E_STATE/etcd" \
	--listen-client-urls http://127.0.0.1:12379 --advertise-client-urls http://127.0.0.1:12379 \
	--listen-peer-urls http://127.0.0.1:12380 --initial-advertise-peer-urls http://127.0.0.1:12380 \
	--initial-cluster warmpath-e2e=http://127.0.0.1:12380 --listen-metrics-urls '' --unsafe-no-fsync

# --- containerd (Debian's) with its own config, root, state and socket:
# Docker's stays untouched.
cat >"$E2E_ETC/containerd.toml" <<TOML
version = 2
root = "$E2E_STATE/containerd"
state = "$E2E_RUN/containerd"
[grpc]
  address = "$E2E_CTR_SOCK"
[ttrpc]
  address = "$E2E_CTR_SOCK.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "$E2E_STATE/containerd-opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$E2E_PAUSE_IMAGE"
  netns_mounts_under_state_dir = true
  tolerate_missing_hugetlb_controller = true
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$E2E_RUN/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "/etc/cni/net.d"
TOML
mkdir -p /etc/cni/net.d
cat >"$E2E_CNI_CONF" <<JSON
{
  "cniVersion": "1.0.0",
  "name": "warmpath-e2e",
  "plugins": [
    {"type": "bridge", "bridge": "$E2E_BRIDGE", "isGateway": true, "ipMasq": false, "hairpinMode": true,
     "ipam": {"type": "host-local", "dataDir": "$E2E_STATE/cni-ipam",
              "ranges": [[{"subnet": "$E2E_POD_CIDR"}]],
              "routes": [{"dst": "$E2E_SVC_CIDR"}, {"dst": "$E2E_NODE_IP/32"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}},
    {"type": "firewall"}
  ]
}
JSON
start containerd containerd --config "$E2E_ETC/containerd.toml"
wait_for containerd 60 e2e_ctr version
e2e_import_image "$E2E_PAUSE_IMAGE" "$E2E_COREDNS_IMAGE" "$E2E_CURL_IMAGE"
wait_for etcd 60 curl -sf http://127.0.0.1:12379/health

# --- control plane
# The requestheader and proxy-client flags switch on the aggregation layer
# (kubeadm's set): the e2e's metrics adapter serves custom.metrics.k8s.io
# behind it. Aggregator routing sends those requests to the adapter's
# endpoint address, not through a ClusterIP. The controller manager's HPA
# loop runs every 5 s instead of 15, so the autoscaling step takes seconds.
start kube-apiserver "$E2E_BIN/kube-apiserver" \
	--etcd-servers=http://127.0.0.1:12379 \
	--advertise-address="$E2E_NODE_IP" --bind-address="$E2E_NODE_IP" --secure-port=6443 \
	--service-cluster-ip-range="$E2E_SVC_CIDR" \
	--client-ca-file="$E2E_PKI/ca.crt" \
	--tls-cert-file="$E2E_PKI/apiserver.crt" --tls-private-key-file="$E2E_PKI/apiserver.key" \
	--kubelet-client-certificate="$E2E_PKI/apiserver-kubelet-client.crt" \
	--kubelet-client-key="$E2E_PKI/apiserver-kubelet-client.key" \
	--kubelet-certificate-authority="$E2E_PKI/ca.crt" \
	--kubelet-preferred-address-types=InternalIP \
	--service-account-issuer=https://kubernetes.default.svc.cluster.local \
	--service-account-key-file="$E2E_PKI/sa.pub" --service-account-signing-key-file="$E2E_PKI/sa.key" \
	--authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
	--allow-privileged=true --profiling=false \
	--requestheader-client-ca-file="$E2E_PKI/front-proxy-ca.crt" --requestheader-allowed-names=front-proxy-client \
	--requestheader-username-headers=X-Remote-User --requestheader-group-headers=X-Remote-Group \
	--requestheader-extra-headers-prefix=X-Remote-Extra- \
	--proxy-client-cert-file="$E2E_PKI/front-proxy-client.crt" --proxy-client-key-file="$E2E_PKI/front-proxy-client.key" \
	--enable-aggregator-routing=true
wait_for kube-apiserver 180 kubectl get --raw /readyz
start kube-controller-manager "$E2E_BIN/kube-controller-manager" \
	--kubeconfig="$KC/controller-manager.kubeconfig" \
	--authentication-kubeconfig="$KC/controller-manager.kubeconfig" \
	--authorization-kubeconfig="$KC/controller-manager.kubeconfig" \
	--bind-address=127.0.0.1 --secure-port=10257 --leader-elect=false \
	--service-account-private-key-file="$E2E_PKI/sa.key" --root-ca-file="$E2E_PKI/ca.crt" \
	--cluster-signing-cert-file="$E2E_PKI/ca.crt" --cluster-signing-key-file="$E2E_PKI/ca.key" \
	--use-service-account-credentials=true \
	--service-cluster-ip-range="$E2E_SVC_CIDR" --allocate-node-cidrs=false --profiling=false \
	--horizontal-pod-autoscaler-sync-period=5s
start kube-scheduler "$E2E_BIN/kube-scheduler" \
	--kubeconfig="$KC/scheduler.kubeconfig" \
	--authentication-kubeconfig="$KC/scheduler.kubeconfig" \
	--authorization-kubeconfig="$KC/scheduler.kubeconfig" \
	--bind-address=127.0.0.1 --secure-port=10259 --leader-elect=false --profiling=false

# --- kubelet
# Pods with dnsPolicy Default get this resolv.conf: nothing listens there,
# so no pod resolves names outside the cluster.
echo "nameserver 127.0.0.1" >"$E2E_ETC/resolv.conf"
cat >"$E2E_ETC/kubelet.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://$E2E_CTR_SOCK
address: $E2E_NODE_IP
healthzBindAddress: 127.0.0.1
healthzPort: 10248
readOnlyPort: 0
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $E2E_PKI/ca.crt}
authorization: {mode: Webhook}
tlsCertFile: $E2E_PKI/kubelet-serving.crt
tlsPrivateKeyFile: $E2E_PKI/kubelet-serving.key
clusterDomain: cluster.local
clusterDNS: [$E2E_DNS_IP]
resolvConf: $E2E_ETC/resolv.conf
podLogsDir: $E2E_STATE/pod-logs
podCIDR: $E2E_POD_CIDR
# ConfigMap and Secret volumes refresh on the pod's sync: every 10 s here
# instead of the default minute, so a test of a live change (the router's
# strategy) waits seconds, not minutes. Nothing else depends on it.
syncFrequency: 10s
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
failSwapOn: false
oomScoreAdj: 0
YAML
start kubelet "$E2E_BIN/kubelet" --config="$E2E_ETC/kubelet.yaml" --kubeconfig="$KC/kubelet.kubeconfig" \
	--root-dir="$E2E_STATE/kubelet" --hostname-override="$E2E_NODE" --node-ip="$E2E_NODE_IP"

# --- kube-proxy, with every knob that would change a kernel setting off
cat >"$E2E_ETC/kube-proxy.yaml" <<YAML
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection: {kubeconfig: $KC/kube-proxy.kubeconfig}
hostnameOverride: $E2E_NODE
bindAddress: $E2E_NODE_IP
clusterCIDR: $E2E_POD_CIDR
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
iptables: {localhostNodePorts: false}
conntrack: {maxPerCore: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
oomScoreAdj: 0
YAML
start kube-proxy "$E2E_BIN/kube-proxy" --config="$E2E_ETC/kube-proxy.yaml"
wait_for "node $E2E_NODE" 120 kubectl wait --for=condition=Ready "node/$E2E_NODE" --timeout=1s

# --- CoreDNS
sed -e "s#@COREDNS_IMAGE@#$E2E_COREDNS_IMAGE#" -e "s#@DNS_IP@#$E2E_DNS_IP#" "$HERE/coredns.yaml" |
	kubectl apply -f - >/dev/null
wait_for coredns 120 kubectl -n kube-system wait --for=condition=Available deploy/coredns --timeout=1s
trap - ERR INT TERM
e2e_log "cluster up; export KUBECONFIG=$E2E_KUBECONFIG"
echo "$E2E_KUBECONFIG"
