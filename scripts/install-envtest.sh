#!/usr/bin/env bash
# install-envtest.sh builds the kube-apiserver and etcd binaries that envtest
# (sigs.k8s.io/controller-runtime/pkg/envtest) starts, from the Go module proxy,
# into a cache directory outside the repository, and prints that directory on
# stdout (and nothing else), ready for KUBEBUILDER_ASSETS:
#
#   export KUBEBUILDER_ASSETS="$(scripts/install-envtest.sh)"
#
# No release download site is reachable here, so the binaries come from the
# wrapper modules hack/kube (cmd/kube-apiserver; the e2e node's other
# Kubernetes binaries come from the same module, scripts/k8s-node/build.sh)
# and hack/etcd, each with its own go.mod and exact pins, not part of go.work. The versions are read from those go.mod files,
# so bumping a pin there is all it takes to get a new build.
#
#   ENVTEST_DIR   cache root (default ${XDG_CACHE_HOME:-$HOME/.cache}/warmpath/envtest)
#
# The first run takes minutes (kube-apiserver ~8 min cold on 2 cores, etcd
# under one); later runs only check the cached binaries' versions. Concurrent
# runs are safe: builds go to a temporary directory renamed into place, under
# a lock where flock(1) exists.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
HACK="$ROOT/hack"
ENVTEST_DIR="${ENVTEST_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/warmpath/envtest}"

log() { printf 'install-envtest: %s\n' "$*" >&2; }

# modver prints the version go.mod in $1 requires for module $2.
modver() {
	awk -v m="$2" '($1 == m && $2 ~ /^v/) || ($1 == "require" && $2 == m) {
		print ($1 == "require") ? $3 : $2; exit }' "$1/go.mod"
}

KUBE_VERSION="$(modver "$HACK/kube" k8s.io/kubernetes)"
ETCD_VERSION="$(modver "$HACK/etcd" go.etcd.io/etcd/server/v3)"
if [[ -z "$KUBE_VERSION" || -z "$ETCD_VERSION" ]]; then
	log "cannot read the pinned versions from $HACK/{kube,etcd}/go.mod"
	exit 1
fi
DEST="$ENVTEST_DIR/${KUBE_VERSION#v}-etcd${ETCD_VERSION#v}"

# have_kube and have_etcd succeed when $1 holds a binary of the pinned version.
have_kube() {
	[[ -x "$1/kube-apiserver" ]] &&
		[[ "$("$1/kube-apiserver" --version 2>/dev/null)" == "Kubernetes $KUBE_VERSION" ]]
}
# (The output is captured before it is searched: piped into grep -q, etcd
# could die of SIGPIPE writing its later lines, which pipefail reports as a
# failure of the whole check.)
have_etcd() {
	local out
	[[ -x "$1/etcd" ]] && out="$("$1/etcd" --version 2>/dev/null)" &&
		grep -qx "etcd Version: ${ETCD_VERSION#v}" <<<"$out"
}

if have_kube "$DEST" && have_etcd "$DEST"; then
	echo "$DEST"
	exit 0
fi

mkdir -p "$ENVTEST_DIR"
if command -v flock >/dev/null 2>&1; then
	exec 9>"$ENVTEST_DIR/.lock"
	flock 9
	# Another run may have finished the build while this one waited.
	if have_kube "$DEST" && have_etcd "$DEST"; then
		echo "$DEST"
		exit 0
	fi
fi

TMP="$(mktemp -d "$ENVTEST_DIR/.build.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
chmod 755 "$TMP" # mktemp makes it private; the cache is readable like TOOLS_BIN

# build NAME DIR PKG LDFLAGS compiles PKG of the wrapper module in DIR to
# $TMP/NAME.
# GOWORK=off: the wrappers are their own modules, outside go.work.
# CGO_ENABLED=0: static binaries, independent of the host's C toolchain.
# -mod=readonly: the committed go.sum is the pin; a mismatch is an error.
build() {
	local name="$1" dir="$2" pkg="$3" ldflags="$4" start=$SECONDS
	(cd "$dir" && GOWORK=off CGO_ENABLED=0 GOFLAGS=-mod=readonly \
		go build -trimpath -buildvcs=false -ldflags "$ldflags" -o "$TMP/$name" "$pkg")
	log "built $name in $((SECONDS - start))s"
}

if have_etcd "$DEST"; then
	cp "$DEST/etcd" "$TMP/etcd"
else
	log "building etcd $ETCD_VERSION (under a minute once)"
	build etcd "$HACK/etcd" . "-s -w"
fi

if have_kube "$DEST"; then
	cp "$DEST/kube-apiserver" "$TMP/kube-apiserver"
else
	log "building kube-apiserver $KUBE_VERSION (about 8 minutes once)"
	# Stamp the version the way Kubernetes' release build does, so
	# `kube-apiserver --version` and /version report the real release.
	minor="${KUBE_VERSION#v*.}"
	minor="${minor%%.*}"
	major="${KUBE_VERSION#v}"
	major="${major%%.*}"
	vpkg=k8s.io/component-base/version
	build kube-apiserver "$HACK/kube" ./cmd/kube-apiserver "-s -w -X $vpkg.gitVersion=$KUBE_VERSION \
		-X $vpkg.gitMajor=$major -X $vpkg.gitMinor=$minor -X $vpkg.gitTreeState=clean"
fi

if ! have_kube "$TMP" || ! have_etcd "$TMP"; then
	log "the built binaries do not report kube-apiserver $KUBE_VERSION and etcd $ETCD_VERSION"
	exit 1
fi

# Swap the finished directory into place in one rename.
rm -rf "$DEST.old"
if [[ -e "$DEST" ]]; then
	mv "$DEST" "$DEST.old"
fi
mv "$TMP" "$DEST"
rm -rf "$DEST.old"
trap - EXIT
echo "$DEST"
