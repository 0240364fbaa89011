#!/usr/bin/env bash
# govulncheck.sh runs govulncheck (source mode) over every go.work module; a
# vulnerability in code we call fails it. `make lint` runs it.
#
# The database: GOVULNDB when set (a URL govulncheck's -db takes, e.g.
# https://vuln.go.dev where it is reachable, or file:///path/to/db);
# otherwise the snapshot scripts/install-tools.sh builds offline from the
# golang.org/x/vulndb module (VULNDB_VERSION). If neither can be had, the
# check is skipped with a message saying so, and the rest of lint still runs.
#
# A called finding listed in scripts/govulncheck-accept.txt (ID, then why) is
# reported but does not fail the run; every entry must say why and when it
# goes away. Findings in packages we import or modules we require but do not
# call are only counted, as govulncheck itself does.
set -euo pipefail

cd "$(dirname "$0")/.."
log() { printf 'govulncheck: %s\n' "$*" >&2; }

scripts/install-tools.sh govulncheck jq
db="${GOVULNDB:-}"
if [[ -z "$db" ]]; then
	if dir="$(scripts/install-tools.sh vulndb)"; then
		db="file://$dir"
	else
		log "SKIPPED: no vulnerability database (the golang.org/x/vulndb snapshot could not be fetched or built, and GOVULNDB is unset); set GOVULNDB=https://vuln.go.dev or file:///path to check"
		exit 0
	fi
fi

accept_file=scripts/govulncheck-accept.txt
declare -A accepted=()
if [[ -f "$accept_file" ]]; then
	while read -r id why; do
		[[ -z "$id" || "$id" == \#* ]] && continue
		accepted["$id"]="$why"
	done <"$accept_file"
fi

log "database $db"
status=0
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
for mod in $(go list -m -f '{{.Dir}}'); do
	rel="./$(realpath --relative-to=. "$mod")"
	log "$rel"
	if ! (cd "$mod" && govulncheck -db "$db" -format json ./...) >"$out"; then
		log "$rel: govulncheck failed"
		status=1
		continue
	fi
	# One line per vulnerability we call: ID, module@version, fixed in, and
	# where our code reaches it (the trace's outermost frame).
	called="$(jq -r '
		select(.finding and (.finding.trace[0].function // "") != "") | .finding |
		[.osv, "\(.trace[0].module)@\(.trace[0].version)", (.fixed_version // "no fix"),
		 (.trace[-1] | "\(.package).\(if .receiver then "\(.receiver)." else "" end)\(.function)")] | @tsv' "$out" |
		sort -u -t$'\t' -k1,1)"
	summaries="$(jq -r 'select(.osv) | .osv | [.id, .summary] | @tsv' "$out")"
	imported="$(jq -r 'select(.finding and (.finding.trace[0].function // "") == "") | .finding.osv' "$out" | sort -u | wc -l)"
	n=0
	ok=()
	while IFS=$'\t' read -r id mv fixed where; do
		[[ -n "$id" ]] || continue
		if [[ -n "${accepted[$id]+x}" ]]; then
			ok+=("$id")
			continue
		fi
		summary="$(awk -F'\t' -v id="$id" '$1 == id { print $2; exit }' <<<"$summaries")"
		log "$rel: VULNERABLE $id in $mv (fixed in $fixed), called from $where: $summary (https://pkg.go.dev/vuln/$id)"
		n=$((n + 1))
	done <<<"$called"
	if [[ ${#ok[@]} -gt 0 ]]; then
		log "$rel: ${#ok[@]} called but accepted in $accept_file: ${ok[*]}"
	fi
	log "$rel: $n called vulnerabilities not accepted; $imported more in code imported or required but not called"
	((n == 0)) || status=1
done
exit $status
