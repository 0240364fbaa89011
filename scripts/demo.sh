#!/usr/bin/env bash
# demo.sh runs the local stack on simulated workers, on loopback: two vllm-sim
# workers (127.0.0.1:8101, :8102, with the LMCache emulation) behind the
# warmpath router (127.0.0.1:8100, prefixaware). It sends three long
# "documents", each asked about twice, through the router, prints each
# response's usage and latency (the repeat lands on the worker that already
# holds the document's KV blocks), the workers' and the router's metrics, and
# stops everything.
#
#   DEMO_MODEL       model name the workers serve (default warmpath/demo-model)
#   DEMO_TIME_SCALE  simulator speed-up over real GPU time (default 10)
set -euo pipefail

cd "$(dirname "$0")/.."
MODEL="${DEMO_MODEL:-warmpath/demo-model}"
TIME_SCALE="${DEMO_TIME_SCALE:-10}"
PORTS=(8101 8102)
SIM_PKG=./tools/cmd/vllm-sim
BIN=bin/vllm-sim
ROUTER_PKG=./services/router/cmd/router
ROUTER_BIN=bin/router
ROUTER_PORT=8100

if [[ -t 1 ]]; then
	say() { printf '\033[1m==> %s\033[0m\n' "$*"; }
else
	say() { printf '==> %s\n' "$*"; }
fi
die() {
	printf 'demo: %s\n' "$*" >&2
	exit 1
}

command -v curl >/dev/null || die "curl is required (apt-get install curl)"
[[ -d "$SIM_PKG" ]] || die "$SIM_PKG does not exist yet"

say "building vllm-sim and the router"
mkdir -p bin
CGO_ENABLED=0 go build -trimpath -buildvcs=false -o "$BIN" "$SIM_PKG"
CGO_ENABLED=0 go build -trimpath -buildvcs=false -o "$ROUTER_BIN" "$ROUTER_PKG"

logdir="$(mktemp -d)"
pids=()
cleanup() {
	local pid
	for pid in "${pids[@]}"; do
		kill "$pid" 2>/dev/null || true
	done
	for pid in "${pids[@]}"; do
		wait "$pid" 2>/dev/null || true
	done
	rm -rf "$logdir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

for port in "${PORTS[@]}" "$ROUTER_PORT"; do
	if curl -s -o /dev/null --max-time 1 "http://127.0.0.1:$port/"; then
		die "port $port is already in use; stop whatever listens there"
	fi
done

say "starting workers on 127.0.0.1:${PORTS[0]} and 127.0.0.1:${PORTS[1]} (--time-scale $TIME_SCALE)"
for port in "${PORTS[@]}"; do
	"$BIN" --host 127.0.0.1 --port "$port" --model "$MODEL" --time-scale "$TIME_SCALE" \
		--kv-transfer-config '{"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both"}' \
		>"$logdir/worker-$port.log" 2>&1 &
	pids+=("$!")
done

for i in "${!PORTS[@]}"; do
	port="${PORTS[$i]}"
	for _ in $(seq 100); do
		if curl -sf -o /dev/null --max-time 1 "http://127.0.0.1:$port/health"; then
			continue 2
		fi
		if ! kill -0 "${pids[$i]}" 2>/dev/null; then
			cat "$logdir/worker-$port.log" >&2
			die "worker on port $port exited"
		fi
		sleep 0.1
	done
	tail -n 20 "$logdir/worker-$port.log" >&2
	die "worker on port $port did not become healthy in 10s"
done

say "starting the router on 127.0.0.1:$ROUTER_PORT (prefixaware)"
"$ROUTER_BIN" --listen "127.0.0.1:$ROUTER_PORT" --log-format text --log-level warn \
	--workers "http://127.0.0.1:${PORTS[0]},http://127.0.0.1:${PORTS[1]}" \
	>"$logdir/router.log" 2>&1 &
pids+=("$!")
for _ in $(seq 100); do
	if curl -sf -o /dev/null --max-time 1 "http://127.0.0.1:$ROUTER_PORT/ready"; then
		break
	fi
	sleep 0.1
done
curl -sf -o /dev/null "http://127.0.0.1:$ROUTER_PORT/ready" || { cat "$logdir/router.log" >&2; die "router not ready in 10s"; }
# The first scrape tells the router each worker's cache size; give it a beat.
sleep 1.2

# Three long "documents" (~2,000 tokens each), as document-QA clients send.
words=(you are a careful assistant for the warmpath project answer questions about
	tiered kv caching and cache aware routing in front of vllm workers cite the
	documentation when you can and keep every answer short and precise)
document() {
	local d="$1" i text=""
	for i in $(seq 0 1999); do
		text+="${words[$(((i * 7 + d * 13) % ${#words[@]}))]} "
	done
	printf 'Document %s. %s' "$d" "$text"
}

field() { grep -o "\"$1\":[0-9]*" <<<"$2" | head -n1 | cut -d: -f2; }

rows=()
request() {
	local doc="$1" question="$2" body out status latency
	# max_tokens=1 makes the request's latency its time to first token.
	body="$(printf '{"model":"%s","prompt":"%s Question: %s","max_tokens":1,"temperature":0}' "$MODEL" "$(document "$doc")" "$question")"
	out="$(curl -sS --max-time 60 -H 'Content-Type: application/json' \
		-w '\n%{http_code} %{time_total}' --data-binary @- \
		"http://127.0.0.1:$ROUTER_PORT/v1/completions" <<<"$body")"
	read -r status latency <<<"$(tail -n1 <<<"$out")"
	out="$(sed '$d' <<<"$out")"
	[[ "$status" == 200 ]] || die "router answered $status: $out"
	local ms
	ms="$(awk -v s="$latency" 'BEGIN { printf "%.1f", s * 1000 }')"
	rows+=("$(printf '%-9s %-22s %8s %8s %10s' "doc $doc" "$question" \
		"$(field prompt_tokens "$out")" "$(field cached_tokens "$out")" "$ms")")
}

say "three documents, each asked twice, through the router"
for doc in 1 2 3; do
	request "$doc" "what is this about?"
done
for doc in 1 2 3; do
	request "$doc" "summarise it."
done
printf '%-9s %-22s %8s %8s %10s\n' document question prompt cached "TTFT ms"
printf '%s\n' "${rows[@]}"

say "worker metrics (GET /metrics, vLLM and LMCache names)"
for port in "${PORTS[@]}"; do
	curl -s "http://127.0.0.1:$port/metrics" |
		grep -E '^(vllm:prefix_cache_(queries|hits)_total|vllm:request_success_total|lmcache:num_lookup_hits_total)' |
		sed "s/^/  $port  /; s/{[^}]*}//"
done

say "router metrics (GET /metrics on the router)"
curl -s "http://127.0.0.1:$ROUTER_PORT/metrics" |
	grep -E '^warmpath_router_(requests_total|prefix_match_ratio_(sum|count)|workers )' | sed 's/^/  /'

cat <<MSG

Each document's second question reports cached_tokens close to its prompt length:
the router's prefixaware strategy sent it to the worker that already held the
document's KV blocks, so prefill skipped them (TTFT drops accordingly; the
simulator runs $TIME_SCALE× faster than the modelled H100). New documents spread
over both workers: when no worker holds a prompt, ties go by a per-prompt hash
among the least-loaded ones, and the load guard keeps a busy worker out of reach.
MSG
