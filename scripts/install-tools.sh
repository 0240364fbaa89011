#!/usr/bin/env bash
# install-tools.sh installs the tools that `make lint` and `make test` need,
# idempotently, into a cache directory outside the repository.
#
#   TOOLS_BIN          where Go-built tools go (default ~/.cache/warmpath/bin)
#   GOLANGCI_VERSION   golangci-lint version (default v2.15.0)
#
# Usage: scripts/install-tools.sh [golangci-lint] [promtool] [nginx] [redis]   (no args: all)
set -euo pipefail

TOOLS_BIN="${TOOLS_BIN:-${XDG_CACHE_HOME:-$HOME/.cache}/warmpath/bin}"
GOLANGCI_VERSION="${GOLANGCI_VERSION:-v2.15.0}"
export PATH="$TOOLS_BIN:$PATH"

log() { printf 'install-tools: %s\n' "$*" >&2; }

install_golangci_lint() {
	local want="${GOLANGCI_VERSION#v}" have=""
	if [[ -x "$TOOLS_BIN/golangci-lint" ]]; then
		have="$("$TOOLS_BIN/golangci-lint" version --short 2>/dev/null || true)"
	fi
	if [[ "${have#v}" == "$want" ]]; then
		return 0
	fi
	log "installing golangci-lint $GOLANGCI_VERSION into $TOOLS_BIN (takes a few minutes once)"
	mkdir -p "$TOOLS_BIN"
	# GOWORK=off: a tool install must not see this repository's go.work.
	# CGO_ENABLED=0 keeps the binary independent of the host's C toolchain.
	(cd / && GOWORK=off CGO_ENABLED=0 GOBIN="$TOOLS_BIN" \
		go install "github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$GOLANGCI_VERSION")
	have="$("$TOOLS_BIN/golangci-lint" version --short)"
	if [[ "${have#v}" != "$want" ]]; then
		log "golangci-lint reports version $have, want $want"
		return 1
	fi
}

# promtool comes from Debian's prometheus package; the smoke suites pipe every
# /metrics page through `promtool check metrics`.
install_promtool() {
	if command -v promtool >/dev/null 2>&1; then
		return 0
	fi
	if ! command -v apt-get >/dev/null 2>&1; then
		log "promtool is missing and apt-get is not available; install Prometheus' promtool by hand"
		return 1
	fi
	local sudo=()
	if [[ "$(id -u)" != 0 ]]; then
		if ! command -v sudo >/dev/null 2>&1; then
			log "promtool is missing; run as root or install sudo"
			return 1
		fi
		sudo=(sudo)
	fi
	log "installing promtool (Debian package prometheus)"
	"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
	"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
		apt-get install -y -qq --no-install-recommends prometheus >/dev/null
	command -v promtool >/dev/null 2>&1
}

# nginx comes from Debian's nginx package; `make bench-router` and its test
# start it as the reverse proxy the router is compared with. Only the binary
# is used, with a config the benchmark writes; the package's own service (on
# a host with systemd, its default site on port 80) is neither needed nor
# touched.
install_nginx() {
	if command -v nginx >/dev/null 2>&1 || [[ -x /usr/sbin/nginx ]]; then
		return 0
	fi
	if ! command -v apt-get >/dev/null 2>&1; then
		log "nginx is missing and apt-get is not available; install nginx by hand"
		return 1
	fi
	local sudo=()
	if [[ "$(id -u)" != 0 ]]; then
		if ! command -v sudo >/dev/null 2>&1; then
			log "nginx is missing; run as root or install sudo"
			return 1
		fi
		sudo=(sudo)
	fi
	log "installing nginx (Debian package nginx)"
	"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
	"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
		apt-get install -y -qq --no-install-recommends nginx >/dev/null
	command -v nginx >/dev/null 2>&1 || [[ -x /usr/sbin/nginx ]]
}

# redis-server and redis-cli come from Debian's redis-server package; the
# router's shared KV index is tested against a real Redis started by the
# test on a free loopback port (the package's own service is not used).
install_redis() {
	if command -v redis-server >/dev/null 2>&1; then
		return 0
	fi
	if ! command -v apt-get >/dev/null 2>&1; then
		log "redis-server is missing and apt-get is not available; install redis-server by hand"
		return 1
	fi
	local sudo=()
	if [[ "$(id -u)" != 0 ]]; then
		if ! command -v sudo >/dev/null 2>&1; then
			log "redis-server is missing; run as root or install sudo"
			return 1
		fi
		sudo=(sudo)
	fi
	log "installing redis-server (Debian package redis-server)"
	"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
	"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
		apt-get install -y -qq --no-install-recommends redis-server redis-tools >/dev/null
	command -v redis-server >/dev/null 2>&1
}

main() {
	local tools=("$@")
	if [[ ${#tools[@]} -eq 0 ]]; then
		tools=(golangci-lint promtool nginx redis)
	fi
	local t
	for t in "${tools[@]}"; do
		case "$t" in
		golangci-lint) install_golangci_lint ;;
		promtool) install_promtool ;;
		nginx) install_nginx ;;
		redis) install_redis ;;
		*)
			log "unknown tool $t"
			return 2
			;;
		esac
	done
}

main "$@"
