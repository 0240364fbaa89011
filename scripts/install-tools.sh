#!/usr/bin/env bash
# install-tools.sh installs the tools that `make lint` and `make test` need,
# idempotently, into a cache directory outside the repository.
#
#   TOOLS_BIN          where Go-built tools go (default ~/.cache/warmpath/bin)
#   GOLANGCI_VERSION   golangci-lint version (default v2.15.0)
#   GOVULNCHECK_VERSION  golang.org/x/vuln's govulncheck (default v1.9.0)
#   VULNDB_VERSION     golang.org/x/vulndb, whose data/osv is the Go vulnerability
#                      database (a pseudo-version: the snapshot govulncheck checks
#                      against; bump it to see newer reports)
#
# Usage: scripts/install-tools.sh [golangci-lint] [govulncheck] [vulndb] [promtool] [nginx] [redis] [pyzmq]   (no args: all)
#
# `vulndb` prints the directory of the database it built (for govulncheck -db).
set -euo pipefail

TOOLS_BIN="${TOOLS_BIN:-${XDG_CACHE_HOME:-$HOME/.cache}/warmpath/bin}"
GOLANGCI_VERSION="${GOLANGCI_VERSION:-v2.15.0}"
GOVULNCHECK_VERSION="${GOVULNCHECK_VERSION:-v1.9.0}"
VULNDB_VERSION="${VULNDB_VERSION:-v0.0.0-20261105234957-e22db6528018}"
export PATH="$TOOLS_BIN:$PATH"

log() { printf 'install-tools: %s\n' "$*" >&2; }

# golangci-lint takes a few minutes to build, once.
install_golangci_lint() {
	go_install github.com/golangci/golangci-lint/v2/cmd/golangci-lint "$GOLANGCI_VERSION"
}

# go_tool_version BIN prints the module version BIN was built from, or nothing.
go_tool_version() {
	[[ -x "$1" ]] || return 0
	go version -m "$1" 2>/dev/null | awk '$1 == "mod" { print $3; exit }'
}

# go_install PKG VERSION installs PKG@VERSION into TOOLS_BIN unless the binary
# there was built from that version.
go_install() {
	local pkg="$1" version="$2" bin="$TOOLS_BIN/${1##*/}"
	if [[ "$(go_tool_version "$bin")" == "$version" ]]; then
		return 0
	fi
	log "installing ${pkg##*/} $version into $TOOLS_BIN"
	mkdir -p "$TOOLS_BIN"
	# GOWORK=off: a tool install must not see this repository's go.work.
	# CGO_ENABLED=0 keeps the binary independent of the host's C toolchain.
	(cd / && GOWORK=off CGO_ENABLED=0 GOBIN="$TOOLS_BIN" go install "$pkg@$version")
	[[ "$(go_tool_version "$bin")" == "$version" ]]
}

install_govulncheck() {
	go_install golang.org/x/vuln/cmd/govulncheck "$GOVULNCHECK_VERSION"
}

# The Go vulnerability database, built offline: golang.org/x/vulndb is a Go
# module whose data/osv holds every report as OSV JSON (what vuln.go.dev is
# generated from), so the module proxy serves it; its cmd/indexdb writes the
# v1 database layout govulncheck reads with -db file://DIR. Built once per
# VULNDB_VERSION under the cache; prints DIR.
install_vulndb() {
	local db="${TOOLS_BIN%/}/../vulndb/$VULNDB_VERSION"
	if [[ ! -f "$db/index/modules.json" ]]; then
		go_install golang.org/x/vulndb/cmd/indexdb "$VULNDB_VERSION"
		local src
		src="$(cd / && GOWORK=off GOFLAGS=-mod=mod go mod download -json "golang.org/x/vulndb@$VULNDB_VERSION" |
			sed -nE 's/^[[:space:]]*"Dir": "(.*)",?$/\1/p')"
		if [[ -z "$src" || ! -d "$src/data/osv" ]]; then
			log "golang.org/x/vulndb@$VULNDB_VERSION has no data/osv"
			return 1
		fi
		log "building the vulnerability database from golang.org/x/vulndb@$VULNDB_VERSION"
		local tmp="$db.tmp.$$"
		rm -rf "$tmp"
		mkdir -p "$(dirname "$db")"
		"$TOOLS_BIN/indexdb" -vulns "$src/data/osv" -out "$tmp" >&2
		rm -rf "$db"
		mv "$tmp" "$db"
	fi
	(cd "$db" && pwd)
}

# jq reads govulncheck's JSON findings (scripts/govulncheck.sh); Debian's jq.
install_jq() {
	apt_ensure jq jq
}

# apt_install CMD PACKAGE... installs Debian packages, as root or with sudo.
apt_install() {
	local cmd="$1"
	shift
	if ! command -v apt-get >/dev/null 2>&1; then
		log "$cmd is missing and apt-get is not available; install $* by hand"
		return 1
	fi
	local sudo=()
	if [[ "$(id -u)" != 0 ]]; then
		if ! command -v sudo >/dev/null 2>&1; then
			log "$cmd is missing; run as root or install sudo"
			return 1
		fi
		sudo=(sudo)
	fi
	log "installing $cmd (Debian package $*)"
	"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
	"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
		apt-get install -y -qq --no-install-recommends "$@" >/dev/null
	command -v "$cmd" >/dev/null 2>&1
}

# apt_ensure CMD PACKAGE... is apt_install unless CMD is already on PATH.
apt_ensure() {
	command -v "$1" >/dev/null 2>&1 || apt_install "$@"
}

# promtool comes from Debian's prometheus package; the smoke suites pipe every
# /metrics page through `promtool check metrics`.
install_promtool() {
	apt_ensure promtool prometheus
}

# nginx comes from Debian's nginx package; `make bench-router` and its test
# start it as the reverse proxy the router is compared with. Only the binary
# is used, with a config the benchmark writes; the package's own service (on
# a host with systemd, its default site on port 80) is neither needed nor
# touched.
install_nginx() {
	# /usr/sbin is not on every user's PATH.
	[[ -x /usr/sbin/nginx ]] || apt_ensure nginx nginx || [[ -x /usr/sbin/nginx ]]
}

# redis-server and redis-cli come from Debian's redis-server package; the
# router's shared KV index is tested against a real Redis started by the
# test on a free loopback port (the package's own service is not used).
install_redis() {
	apt_ensure redis-server redis-server redis-tools
}

# python3-zmq (pyzmq over Debian's libzmq) is the real ZeroMQ peer the ZMTP
# guard is tested against (libs/zmtpguard, libzmq_test.go); Debian's own
# python3, whatever other python is first on PATH.
install_pyzmq() {
	if /usr/bin/python3 -c 'import zmq' >/dev/null 2>&1; then
		return 0
	fi
	apt_install python3 python3 python3-zmq && /usr/bin/python3 -c 'import zmq' >/dev/null 2>&1
}

main() {
	local tools=("$@")
	if [[ ${#tools[@]} -eq 0 ]]; then
		tools=(golangci-lint govulncheck jq promtool nginx redis pyzmq)
	fi
	local t
	for t in "${tools[@]}"; do
		case "$t" in
		golangci-lint) install_golangci_lint ;;
		govulncheck) install_govulncheck ;;
		vulndb) install_vulndb ;;
		jq) install_jq ;;
		promtool) install_promtool ;;
		nginx) install_nginx ;;
		redis) install_redis ;;
		pyzmq) install_pyzmq ;;
		*)
			log "unknown tool $t"
			return 2
			;;
		esac
	done
}

main "$@"
