#!/usr/bin/env bash
# pki.sh DIR NODE NODE_IP: a throwaway CA for the e2e node, the serving and
# client certificates of its components, and the service-account key pair,
# made with openssl. Files that exist are kept.
set -euo pipefail
dir="$1" node="$2" ip="$3"
mkdir -p "$dir"
cd "$dir"
umask 077
if [[ ! -f ca.key ]]; then
	openssl genrsa -out ca.key 2048 2>/dev/null
	openssl req -x509 -new -key ca.key -days 30 -subj "/CN=warmpath-e2e-ca" -out ca.crt
fi
# The aggregation layer's own CA, as kubeadm makes it: the API server
# proxies to an extension API server (the e2e's metrics adapter) with a
# client certificate from it, which the extension trusts for the user it
# names in request headers, and for nothing else.
if [[ ! -f front-proxy-ca.key ]]; then
	openssl genrsa -out front-proxy-ca.key 2048 2>/dev/null
	openssl req -x509 -new -key front-proxy-ca.key -days 30 -subj "/CN=warmpath-e2e-front-proxy-ca" -out front-proxy-ca.crt
fi
if [[ ! -f sa.key ]]; then
	openssl genrsa -out sa.key 2048 2>/dev/null
	openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
fi
# cert NAME SUBJECT EKU [SANS [CA]]: a key and a certificate signed by the
# CA (ca, or the one named).
cert() {
	local n="$1" subj="$2" eku="$3" sans="${4:-}" ca="${5:-ca}"
	[[ -f $n.crt ]] && return
	openssl genrsa -out "$n.key" 2048 2>/dev/null
	openssl req -new -key "$n.key" -subj "$subj" -out "$n.csr"
	{
		echo "basicConstraints=CA:FALSE"
		echo "keyUsage=critical,digitalSignature,keyEncipherment"
		echo "extendedKeyUsage=$eku"
		[[ -n $sans ]] && echo "subjectAltName=$sans"
	} >"$n.ext"
	openssl x509 -req -in "$n.csr" -CA "$ca.crt" -CAkey "$ca.key" -CAcreateserial -days 30 \
		-extfile "$n.ext" -out "$n.crt" 2>/dev/null
	rm -f "$n.csr" "$n.ext"
}
svc_ip="${E2E_SVC_CIDR%.*/*}.1" # the kubernetes Service's ClusterIP: first of the range
cert apiserver "/CN=kube-apiserver" serverAuth \
	"DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost,DNS:$node,IP:127.0.0.1,IP:$svc_ip,IP:$ip"
cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" clientAuth
cert admin "/O=system:masters/CN=kubernetes-admin" clientAuth
cert controller-manager "/CN=system:kube-controller-manager" clientAuth
cert scheduler "/CN=system:kube-scheduler" clientAuth
cert kube-proxy "/CN=system:kube-proxy" clientAuth
cert kubelet "/O=system:nodes/CN=system:node:$node" clientAuth
cert kubelet-serving "/CN=$node" serverAuth "DNS:$node,DNS:localhost,IP:127.0.0.1,IP:$ip"
cert front-proxy-client "/CN=front-proxy-client" clientAuth "" front-proxy-ca
