#!/usr/bin/env bash
# down.sh — stop the e2e node and leave the machine as up.sh found it: every
# process by its recorded PID (and the containers and shims of the node's
# containerd), mounts under the node's state, the two bridges (the
# pods' and the node address's), the KUBE-*/CNI-* iptables chains and the nftables tables that
# appeared, the kubepods cgroups, the kernel settings the kubelet changed,
# and the directories it created. Safe to run twice, and after a failed or
# killed up.sh. KEEP_STATE=1 keeps $E2E_STATE (etcd data, containerd's
# images, logs) for a look afterwards; the built binaries are always kept.
set -uo pipefail
E2E_STEP=down
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
e2e_need_root

# stop NAME: SIGTERM the recorded PID, SIGKILL after 15 s.
stop() {
	local f="$E2E_RUN/pids/$1.pid" pid
	[[ -f $f ]] || return 0
	pid="$(cat "$f")"
	if kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid"
		for ((i = 0; i < 30; i++)); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.5
		done
		if kill -0 "$pid" 2>/dev/null; then
			e2e_log "killing $1 ($pid)"
			kill -KILL "$pid"
		fi
		e2e_log "stopped $1 ($pid)"
	fi
	rm -f "$f"
}

stop kubelet
# Every container of the node's containerd, killed through containerd so
# its shims reap them; then the records.
if [[ -S $E2E_CTR_SOCK ]]; then
	for t in $(e2e_ctr tasks ls -q 2>/dev/null); do e2e_ctr tasks kill -s SIGKILL "$t" >/dev/null 2>&1; done
	for ((i = 0; i < 20; i++)); do
		[[ -z $(e2e_ctr tasks ls 2>/dev/null | awk 'NR > 1 && $3 != "STOPPED"') ]] && break
		sleep 0.5
	done
	for t in $(e2e_ctr tasks ls -q 2>/dev/null); do e2e_ctr tasks rm -f "$t" >/dev/null 2>&1; done
	for c in $(e2e_ctr containers ls -q 2>/dev/null); do e2e_ctr containers rm "$c" >/dev/null 2>&1; done
	e2e_log "removed the node's containers"
fi
if [[ -f $E2E_RUN/pids/kube-proxy.pid ]]; then
	stop kube-proxy
	[[ -x $E2E_BIN/kube-proxy ]] && "$E2E_BIN/kube-proxy" --cleanup >/dev/null 2>&1 && e2e_log "kube-proxy --cleanup done"
fi
for n in kube-scheduler kube-controller-manager kube-apiserver etcd containerd; do stop "$n"; done
# Shims outlive the containerd that started them (they are reparented); they
# name its socket on their command line.
for p in $(pgrep -f "containerd-shim-runc-v2 .*-address $E2E_CTR_SOCK" || true); do
	e2e_log "killing leftover shim $p"
	kill -KILL "$p"
done

# Mounts below the node's directories, deepest first.
awk -v a="$E2E_RUN" -v b="$E2E_STATE" 'index($2, a) == 1 || index($2, b) == 1 {print $2}' /proc/self/mounts |
	sort -r | while read -r m; do umount -l "$m" && e2e_log "unmounted $m"; done

for l in "$E2E_BRIDGE" "$E2E_IFACE"; do
	ip link show "$l" >/dev/null 2>&1 && ip link del "$l" && e2e_log "deleted link $l"
done
# veths whose pod namespaces are gone go with them; any left on the bridge
# went with it.

# iptables: jumps into KUBE-*/CNI-* chains from the built-in chains, then
# the chains themselves.
for ipt in iptables ip6tables; do
	command -v "$ipt" >/dev/null || continue
	for t in filter nat mangle; do
		"$ipt" -t "$t" -S 2>/dev/null | grep -E '^-A [A-Z]+ .*-j (KUBE-|CNI-)' | grep -vE '^-A (KUBE-|CNI-)' |
			sed 's/^-A/-D/' | while read -r r; do eval "$ipt -t $t $r"; done
		chains="$("$ipt" -t "$t" -S 2>/dev/null | awk '/^-N (KUBE-|CNI-)/ {print $2}')"
		for c in $chains; do "$ipt" -t "$t" -F "$c"; done
		for c in $chains; do "$ipt" -t "$t" -X "$c" && e2e_log "removed $ipt $t $c"; done
	done
done
saved="$E2E_STATE/saved"
# nftables tables that appeared since up.sh and hold no rules any more.
if [[ -f $saved/nft-tables ]]; then
	nft list tables | grep -vxF -f "$saved/nft-tables" | while read -r _ fam name; do
		if [[ -z $(nft list table "$fam" "$name" | grep -vE '^\s*(table|chain|type|policy|\}|$)') ]]; then
			nft delete table "$fam" "$name" && e2e_log "deleted empty nft table $fam $name"
		fi
	done
fi

# cgroups the kubelet made (cgroupfs driver; v1 hierarchies, or v2).
for h in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods; do
	[[ -d $h ]] || continue
	find "$h" -depth -type d -exec rmdir {} \; 2>/dev/null
	if [[ -d $h ]]; then e2e_log "could not remove $h"; else e2e_log "removed $h"; fi
done

if [[ -f $saved/sysctl ]]; then
	while IFS='=' read -r k v; do sysctl -q -w "$k=$v"; done <"$saved/sysctl"
	e2e_log "restored kernel settings"
fi
rm -f "$E2E_CNI_CONF"
if [[ -f $saved/made-etc-cni ]]; then rm -rf /etc/cni; else rmdir /etc/cni/net.d 2>/dev/null; fi
[[ -f $saved/made-var-log-containers ]] && rm -rf /var/log/containers /var/log/pods
# containerd 1.6 puts shim sockets in /run/containerd/s whatever its state
# directory (Docker's containerd shares it): only what is empty goes.
rmdir /run/containerd/s 2>/dev/null
[[ -f $saved/made-run-containerd ]] && rmdir /run/containerd 2>/dev/null
rm -rf "$E2E_RUN"
if [[ ${KEEP_STATE:-0} == 1 ]]; then
	rm -rf "$saved"
	e2e_log "kept $E2E_STATE"
else
	rm -rf "$E2E_STATE"
fi
e2e_log "done"
