#!/usr/bin/env bash
# images.sh builds a FROM-scratch image for every binary in bin/ with the
# generic build/Dockerfile, tagged $IMAGE_PREFIX/<name>:$IMAGE_TAG
# (default warmpath/<name>:dev). It never pulls: the images have no base.
#
# Usage: scripts/images.sh [bin-dir]
set -euo pipefail

cd "$(dirname "$0")/.."
BIN_DIR="${1:-bin}"
IMAGE_PREFIX="${IMAGE_PREFIX:-warmpath}"
IMAGE_TAG="${IMAGE_TAG:-dev}"

# port_for prints the port a binary listens on by default; EXPOSE is
# documentation only, so an unknown binary gets the router's 8080.
port_for() {
	case "$1" in
	vllm-sim) echo 8000 ;;
	*) echo 8080 ;;
	esac
}

shopt -s nullglob
bins=()
for f in "$BIN_DIR"/*; do
	[[ -f "$f" && -x "$f" ]] && bins+=("$f")
done
if [[ ${#bins[@]} -eq 0 ]]; then
	echo "images: no binaries in $BIN_DIR/; run 'make build' first" >&2
	exit 1
fi

ctx="$(mktemp -d)"
trap 'rm -rf "$ctx"' EXIT

for f in "${bins[@]}"; do
	name="$(basename "$f")"
	mkdir -p "$ctx/$name"
	# A hard link keeps the context cheap; fall back to a copy across devices.
	ln -f "$f" "$ctx/$name/$name" 2>/dev/null || cp "$f" "$ctx/$name/$name"
	ln -sfn "$name" "$ctx/$name/entrypoint"
	tag="$IMAGE_PREFIX/$name:$IMAGE_TAG"
	echo "images: $tag"
	# Only this binary's directory is in the context sent to the daemon.
	# The builder's chatter (the legacy builder's deprecation notice) is shown
	# only when the build fails.
	if ! out="$(docker build --quiet \
		-f build/Dockerfile \
		--build-arg "BIN=$name" \
		--build-arg "PORT=$(port_for "$name")" \
		-t "$tag" \
		"$ctx" 2>&1)"; then
		printf '%s\n' "$out" >&2
		echo "images: building $tag failed" >&2
		exit 1
	fi
	rm -rf "${ctx:?}/$name"
done
