#!/usr/bin/env bash
# demo.sh shows prefix caching on two simulated vLLM workers, on loopback.
#
# It builds tools/cmd/vllm-sim, starts two workers on 127.0.0.1:8101 and
# 127.0.0.1:8102, sends one long shared prompt twice to each, prints each
# response's usage (the repeat is served from the worker's prefix cache) and a
# summary, then stops the workers. Until the router exists the requests go to
# the workers directly: the second worker misses on its first request because
# nothing routed the prompt to the worker that already had it.
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

say "building vllm-sim"
mkdir -p bin
CGO_ENABLED=0 go build -trimpath -buildvcs=false -o "$BIN" "$SIM_PKG"

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

for port in "${PORTS[@]}"; do
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

# A long shared "system prompt" (~2,000 tokens), as many chat sessions send.
words=(you are a careful assistant for the warmpath project answer questions about
	tiered kv caching and cache aware routing in front of vllm workers cite the
	documentation when you can and keep every answer short and precise)
prompt=""
for i in $(seq 0 1999); do
	prompt+="${words[$((i * 7 % ${#words[@]}))]} "
done
prompt+="Question: why does the second request start faster?"

field() { grep -o "\"$1\":[0-9]*" <<<"$2" | head -n1 | cut -d: -f2; }

rows=()
request() {
	local port="$1" label="$2" body out status latency
	# max_tokens=1 makes the request's latency its time to first token.
	body="$(printf '{"model":"%s","prompt":"%s","max_tokens":1,"temperature":0,"stream":false}' "$MODEL" "$prompt")"
	out="$(curl -sS --max-time 60 -H 'Content-Type: application/json' \
		-w '\n%{http_code} %{time_total}' --data-binary @- \
		"http://127.0.0.1:$port/v1/completions" <<<"$body")"
	read -r status latency <<<"$(tail -n1 <<<"$out")"
	out="$(sed '$d' <<<"$out")"
	[[ "$status" == 200 ]] || die "worker $port answered $status: $out"

	local usage
	usage="$(grep -o '"usage":{.*' <<<"$out" || true)"
	if command -v jq >/dev/null; then
		usage="$(jq -c .usage <<<"$out")"
	fi
	printf '  %-24s usage %s\n' "$label" "$usage"
	local ms
	ms="$(awk -v s="$latency" 'BEGIN { printf "%.1f", s * 1000 }')"
	rows+=("$(printf '%-6s %-8s %8s %8s %10s' "$port" "${label##* }" \
		"$(field prompt_tokens "$out")" "$(field cached_tokens "$out")" "$ms")")
}

for port in "${PORTS[@]}"; do
	say "worker 127.0.0.1:$port: the shared prompt, twice"
	request "$port" "$port first"
	request "$port" "$port repeat"
done

say "worker metrics (GET /metrics, vLLM and LMCache names)"
for port in "${PORTS[@]}"; do
	curl -s "http://127.0.0.1:$port/metrics" |
		grep -E '^(vllm:prefix_cache_(queries|hits)_total|vllm:time_to_first_token_seconds_(sum|count)|lmcache:num_lookup_hits_total)' |
		sed "s/^/  $port  /; s/{[^}]*}//"
done

say "summary (TTFT = latency of a 1-token completion, simulator time scaled by $TIME_SCALE)"
printf '%-6s %-8s %8s %8s %10s\n' worker request prompt cached "TTFT ms"
printf '%s\n' "${rows[@]}"
cat <<MSG

The repeat on each worker reports cached_tokens > 0: its prefix cache kept the
shared prompt's KV blocks, so prefill skipped them. Worker ${PORTS[1]} missed on its
first request although ${PORTS[0]} had the prompt cached; the router's cache-aware
strategies exist to send it to the worker that already holds those blocks.
MSG
