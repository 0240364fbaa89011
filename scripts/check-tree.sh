#!/usr/bin/env bash
# check-tree.sh fails when the repository holds what a clean clone must not
# depend on or carry: build products (executables, object files) and code
# or build files that read ../shared, the workplace folder beside the
# repository, at run time. `make lint` runs it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

status=0

# Executables and objects by their magic bytes: ELF, Mach-O, PE, and Go
# archives. A binary is a build product; `make build` writes to bin/.
while IFS= read -r -d '' f; do
	[[ -f "$f" ]] || continue
	magic="$(head -c 4 "$f" | od -An -tx1 | tr -d ' \n')"
	case "$magic" in
	7f454c46 | cffaedfe | cefaedfe | feedfacf | feedface | 4d5a*)
		echo "check-tree: $f is a binary build product; build into bin/ (ignored) instead" >&2
		status=1
		;;
	esac
done < <(git ls-files -z)

# Anything the project runs (code, scripts, build and chart files) must
# find its data inside the repository.
if hits="$(git grep -n -I -E '\.\./shared|shared/(traces|reference)' -- \
	'*.go' '*.sh' 'Makefile' '*.mk' '*.yaml' '*.yml' '*.json' '*.tpl' '.ci/*' ':!scripts/check-tree.sh')"; then
	echo "check-tree: these read ../shared, outside the repository (commit what they need instead):" >&2
	echo "$hits" >&2
	status=1
fi

exit $status
