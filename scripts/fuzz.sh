#!/usr/bin/env bash
# fuzz.sh runs every Fuzz* target in every go.work module for FUZZTIME each
# (default 10s). Targets are found by grep, so new ones need no registration.
# A failing input is written to the package's testdata/fuzz/ by `go test`;
# commit it as a regression seed.
set -euo pipefail

cd "$(dirname "$0")/.."
FUZZTIME="${FUZZTIME:-10s}"

mapfile -t modules < <(go list -m -f '{{.Dir}}')
targets=0
failed=()
for mod in "${modules[@]}"; do
	# file:func pairs, e.g. libs/kvevents/decode_test.go:FuzzDecode
	while IFS=: read -r file fn; do
		[[ -n "$fn" ]] || continue
		pkg="./$(realpath --relative-to=. "$(dirname "$file")")"
		targets=$((targets + 1))
		echo "fuzz: $pkg $fn ($FUZZTIME)"
		if ! go test -run='^$' -fuzz="^${fn}\$" -fuzztime="$FUZZTIME" "$pkg"; then
			failed+=("$pkg $fn")
		fi
	done < <(grep -rEo --include='*_test.go' '^func Fuzz[A-Za-z0-9_]*\(' "$mod" |
		sed -E 's/^(.*):func (Fuzz[A-Za-z0-9_]*)\($/\1:\2/' | sort -u)
done

echo "fuzz: $targets target(s) run"
if [[ ${#failed[@]} -gt 0 ]]; then
	printf 'fuzz: FAILED %s\n' "${failed[@]}" >&2
	exit 1
fi
