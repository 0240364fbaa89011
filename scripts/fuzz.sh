#!/usr/bin/env bash
# fuzz.sh runs every Fuzz* target in every go.work module briefly; `make test`
# (so CI) runs it through `make fuzz`.
#
#   FUZZ_BUDGET  seconds of fuzzing shared by all targets (default 60): each
#                target gets FUZZ_BUDGET / targets, at least FUZZ_MIN (2) and
#                at most FUZZ_MAX (10) seconds. Building each target's
#                instrumented test binary comes on top (a few seconds each).
#   FUZZTIME     a fixed -fuzztime per target (e.g. 30s, 5000x) instead of the
#                budget, for a longer run by hand: `make fuzz FUZZTIME=5m`.
#
# Targets are found by grep (`func Fuzz...` in *_test.go), so a new target
# needs no registration. `go test -fuzz` runs one target per invocation. A
# failing input is written by `go test` to the package's testdata/fuzz/<Target>/
# and the run fails; fix the bug and commit that file as a regression seed
# (plain `go test` then replays it).
set -euo pipefail

cd "$(dirname "$0")/.."
FUZZ_BUDGET="${FUZZ_BUDGET:-60}"
FUZZ_MIN="${FUZZ_MIN:-2}"
FUZZ_MAX="${FUZZ_MAX:-10}"
# A crash is minimised before it is written; bound that so a failing CI run
# does not spend a minute per crash.
FUZZ_MINIMIZE="${FUZZ_MINIMIZE:-10s}"

# "dir<TAB>FuzzName" for every target in every workspace module.
mapfile -t modules < <(go list -m -f '{{.Dir}}')
mapfile -t targets < <(
	for mod in "${modules[@]}"; do
		grep -rEo --include='*_test.go' '^func Fuzz[A-Za-z0-9_]*\(' "$mod" || true
	done | sed -E 's/^(.*)\/[^/]*_test\.go:func (Fuzz[A-Za-z0-9_]*)\($/\1\t\2/' | sort -u
)
if [[ ${#targets[@]} -eq 0 ]]; then
	echo "fuzz: no Fuzz* targets found" >&2
	exit 1
fi

if [[ -n "${FUZZTIME:-}" ]]; then
	per="$FUZZTIME"
else
	budget="${FUZZ_BUDGET%s}"
	secs=$((budget / ${#targets[@]}))
	((secs < FUZZ_MIN)) && secs=$FUZZ_MIN
	((secs > FUZZ_MAX)) && secs=$FUZZ_MAX
	per="${secs}s"
fi
echo "fuzz: ${#targets[@]} target(s), $per each"

# fuzz_one fuzzes one target. The fuzzing engine sometimes ends a run at
# -fuzztime with "context deadline exceeded" while a worker is mid-input and
# reports that as a failure with no failing input written; such a run is
# tried once more. A real failure always writes its input, and is not retried.
fuzz_one() {
	local pkg=$1 fn=$2 dir=$3 out attempt
	out=$(mktemp)
	for attempt in 1 2; do
		local began="@$(date +%s)"
		# -vet=off: lint and the unit tests vet the same code already.
		if go test -vet=off -run='^$' -fuzz="^${fn}\$" -fuzztime="$per" \
			-fuzzminimizetime="$FUZZ_MINIMIZE" "$pkg" 2>&1 | tee "$out"; then
			rm -f "$out"
			return 0
		fi
		if ((attempt == 2)) || ! grep -q 'context deadline exceeded' "$out" ||
			[[ -n "$(find "$dir/testdata/fuzz/$fn" -type f -newermt "$began" 2>/dev/null)" ]]; then
			break
		fi
		echo "fuzz: $pkg $fn: the engine timed out with no failing input; running it once more"
	done
	rm -f "$out"
	return 1
}

start=$SECONDS
since="@$(date +%s)"
failed=()
for t in "${targets[@]}"; do
	dir="${t%%$'\t'*}"
	fn="${t#*$'\t'}"
	pkg="./$(realpath --relative-to=. "$dir")"
	echo "fuzz: $pkg $fn ($per)"
	if ! fuzz_one "$pkg" "$fn" "$dir"; then
		failed+=("$pkg $fn")
		# go test names the file it wrote; list it again where it is easy to find.
		find "$dir/testdata/fuzz/$fn" -type f -newermt "$since" \
			-printf 'fuzz: failing input: %p\n' 2>/dev/null || true
	fi
done

echo "fuzz: ${#targets[@]} target(s) run in $((SECONDS - start))s, ${#failed[@]} failed"
if [[ ${#failed[@]} -gt 0 ]]; then
	printf 'fuzz: FAILED %s\n' "${failed[@]}" >&2
	echo "fuzz: the failing inputs are in each package's testdata/fuzz/<Target>/; fix the bug and commit them" >&2
	exit 1
fi
