# Makefile — the one entry point for building, testing and demoing warmpath.
#
#   make help              every target, with what it does (from the ## comments below)
#
# Modules are read from go.work, so a module added there (services/router, ...)
# is built, linted and tested without editing this file.

SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help
.DELETE_ON_ERROR:
MAKEFLAGS += --no-builtin-rules --no-print-directory

GO ?= go

# Tools are cached outside the repository so `make clean` and fresh clones
# keep them, and they are found first on PATH by every recipe.
TOOLS_BIN ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/warmpath/bin
export TOOLS_BIN
export PATH := $(TOOLS_BIN):$(PATH)

# Testcontainers' reaper (Ryuk) is an image pulled from a registry; none is
# reachable here. The harness terminates every container it starts instead.
export TESTCONTAINERS_RYUK_DISABLED := true
# Tell the harness that a missing Docker is a failure, not a skip.
export WARMPATH_REQUIRE_DOCKER := 1

# Workspace modules as ./relative paths, in go.work order.
MODULES := $(patsubst $(CURDIR)/%,./%,$(shell $(GO) list -m -f '{{.Dir}}'))
INTEGRATION_MODULES := $(filter ./tests,$(MODULES))
UNIT_MODULES := $(filter-out $(INTEGRATION_MODULES),$(MODULES))

# Static, reproducible binaries: no cgo, no local paths, and no VCS stamp, so
# an unchanged tree gives identical bytes (and a build in a checkout owned by
# another user does not trip over git's safe.directory check).
BUILDFLAGS ?= -trimpath -buildvcs=false -ldflags=-s\ -w

# The race detector needs cgo and a C compiler; without one, test without it.
RACE ?= $(if $(shell command -v "$$($(GO) env CC)" 2>/dev/null),-race,)
UNIT_TIMEOUT ?= 10m
INTEGRATION_TIMEOUT ?= 15m
# make fuzz: FUZZ_BUDGET seconds of fuzzing shared by every target (2-10 s
# each), or a fixed FUZZTIME per target when set (`make fuzz FUZZTIME=5m`).
FUZZ_BUDGET ?= 60
FUZZTIME ?=

.PHONY: help
help: ## list the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-18s %s\n", $$1, $$2}'

.PHONY: tools
tools: ## install golangci-lint, govulncheck, jq, promtool, nginx and redis-server (idempotent)
	@scripts/install-tools.sh

.PHONY: build
build: ## static binaries of every */cmd/* main package into bin/
	@mkdir -p bin
	@cmds="$$($(GO) list -f '{{if eq .Name "main"}}{{.ImportPath}}{{end}}' \
		$(addsuffix /...,$(MODULES)) 2> >(grep -v 'matched no packages' >&2) | grep '/cmd/' || true)"; \
	if [[ -z "$$cmds" ]]; then echo "build: no */cmd/* main packages yet"; exit 0; fi; \
	echo "build:" $$cmds; \
	CGO_ENABLED=0 $(GO) build $(BUILDFLAGS) -o ./bin/ $$cmds

.PHONY: lint
lint: ## the tree check (no build products, nothing read from outside the repository), golangci-lint, then govulncheck (a called vulnerability fails), over every go.work module
	@scripts/check-tree.sh
	@scripts/install-tools.sh golangci-lint
	@status=0; for m in $(MODULES); do \
		echo "lint: $$m"; \
		(cd "$$m" && golangci-lint run --config "$(CURDIR)/.golangci.yml" ./...) || status=1; \
	done; \
	scripts/govulncheck.sh || status=1; \
	exit $$status

.PHONY: vulncheck
vulncheck: ## govulncheck alone over every module (GOVULNDB= overrides the offline database)
	@scripts/govulncheck.sh

.PHONY: test
test: ## lint, then unit tests, fuzzing, integration suites, then the e2e suite on a real node (what .ci/run runs)
	@$(MAKE) lint
	@$(MAKE) test-unit
	@$(MAKE) fuzz
	@$(MAKE) test-integration
	@$(MAKE) test-e2e

.PHONY: test-unit
test-unit: ## go test (with -race where a C compiler exists) over every module but tests/
	@# promtool checks every /metrics exposition; nginx is the bench peer the
	@# bench suite smoke-tests; envtest's kube-apiserver and etcd serve the
	@# Kubernetes discovery (and later operator) suites; pyzmq is the real
	@# libzmq peer of the ZMTP guard's tests.
	@scripts/install-tools.sh promtool nginx redis pyzmq
	assets="$$(scripts/install-envtest.sh)"; \
	$(if $(RACE),CGO_ENABLED=1) KUBEBUILDER_ASSETS="$$assets" $(GO) test $(RACE) -timeout $(UNIT_TIMEOUT) $(addsuffix /...,$(UNIT_MODULES))

.PHONY: test-integration
test-integration: ## testcontainers suites in tests/ (needs Docker)
	@# redis-server: the faults suite packages it into a FROM-scratch image, and
	@# tests/router shares a kvaware index through one; promtool checks expositions.
	@scripts/install-tools.sh promtool redis
	@docker info >/dev/null 2>&1 || { echo "test-integration: Docker is not reachable" >&2; exit 1; }
	@# -count=1: the suites build binaries from the tree in a subprocess, which
	@# the test cache cannot see, so a cached pass could be stale.
	@# The chart suite installs the chart into envtest's kube-apiserver.
	assets="$$(scripts/install-envtest.sh)"; \
	pkgs="$$($(GO) list $(addsuffix /...,$(INTEGRATION_MODULES)) | grep -v '/tests/e2e$$')"; \
	KUBEBUILDER_ASSETS="$$assets" $(GO) test -count=1 -timeout $(INTEGRATION_TIMEOUT) $$pkgs

.PHONY: test-e2e
test-e2e: images ## tests/e2e on a real single-node Kubernetes (scripts/k8s-node: built once, ~30 s up); needs root and Docker
	@scripts/e2e.sh

.PHONY: dashboards
dashboards: ## regenerate the Grafana dashboards (dashboards/*.json; a unit test fails when they are stale)
	$(GO) run ./services/dashgen/cmd/dashgen --out dashboards

.PHONY: golden
golden: ## rewrite the chart's golden manifests (tests/chart/testdata) after an intended change
	$(GO) test ./tests/chart -run TestRenderGolden -update

.PHONY: generate
generate: ## regenerate code and manifests (//go:generate: operator CRD and deepcopy via pinned controller-gen)
	@$(GO) generate $(addsuffix /...,$(MODULES))

.PHONY: fuzz
fuzz: ## every Fuzz* target briefly: FUZZ_BUDGET (60) s shared, 2-10 s each, or FUZZTIME each
	@FUZZ_BUDGET=$(FUZZ_BUDGET) FUZZTIME=$(FUZZTIME) scripts/fuzz.sh

.PHONY: envtest
envtest: ## build envtest's kube-apiserver and etcd (once; cached outside the repo)
	@scripts/install-envtest.sh >/dev/null

BENCH_ROUTER_FLAGS ?=

.PHONY: bench-router
bench-router: ## router vs nginx: added latency and max RPS -> bench/results/router_overhead.json
	@scripts/install-tools.sh nginx
	$(GO) run ./tools/cmd/bench-router $(BENCH_ROUTER_FLAGS)

.PHONY: bench-index
bench-index: ## kvaware index: ingest rate, lookup latency, bytes per block -> bench/results/kv_index.json
	$(GO) run ./tools/cmd/bench-index --out bench/results/kv_index.json

.PHONY: bench-l2
bench-l2: ## cache server vs Redis vs a raw TCP ceiling, 4 and 32 MiB values -> bench/results/l2_throughput.json
	@scripts/install-tools.sh redis
	$(GO) run ./tools/cmd/bench-l2

.PHONY: bench-cacheserver-memory
bench-cacheserver-memory: ## cache server peak RSS under 64-connection PUT/GET churn vs 1.25 x capacity + 64 MiB, and Redis -> bench/results/cacheserver_memory.json
	@scripts/install-tools.sh redis
	$(GO) run ./tools/cmd/bench-cacheserver-memory

# LMCache L1 per worker for bench-routing, GB: an 8-GPU H100 server has 2 TB of
# host RAM, so 100 GB per GPU worker is a production size (LMCache's built-in
# default, 5 GB, is a placeholder; docs/benchmarks.md has both).
ROUTING_L1_GB ?= 100

# What the simulated LMCache L1 publishes (docs/simulator.md): store-only is
# current LMCache and the default; none and full bound kvaware's knowledge
# from below and above.
ROUTING_L1_EVENTS := store-only none full

.PHONY: bench-routing
bench-routing: ## des mode on the shipped Mooncake trace (or TRACE=path), every strategy, each L1 event mode, 8 workers -> bench/results/routing_<trace>_<mode>.json; then hit rate and TTFT for 1, 3 and 5 relaying router replicas per strategy -> bench/results/routing_replicas.json
	for mode in $(ROUTING_L1_EVENTS); do \
		$(GO) run ./tools/cmd/warmpath-bench des --workload trace --workers 8 --l1-gb $(ROUTING_L1_GB) --l1-events $$mode $(if $(TRACE),--trace $(TRACE)); \
	done
	$(GO) run ./tools/cmd/warmpath-bench replicas --workload trace --workers 8 --l1-gb $(ROUTING_L1_GB) --routers 1,3,5 $(if $(TRACE),--trace $(TRACE)) --out bench/results/routing_replicas.json

# The generated workload shapes (docs/benchmarks.md, "Workloads") that show
# the strategies are not tuned to the trace; des names each report after its
# workload, as it names the trace run's after the trace.
ROUTING_SHAPES := many-short-chats few-long-docs bursty-fanout skewed-popularity

.PHONY: bench-routing-shapes
bench-routing-shapes: ## des mode on each generated workload shape, every strategy, 8 workers, store-only L1 events -> bench/results/routing_<shape>_store-only.json
	for shape in $(ROUTING_SHAPES); do \
		$(GO) run ./tools/cmd/warmpath-bench des --workload $$shape --workers 8 --l1-gb $(ROUTING_L1_GB); \
	done

# bench-capacity replays the trace's first CAPACITY_TRACE_MAX requests, half
# the chat's users and half the long documents, and bounds each search to
# CAPACITY_MAX_PROBES runs (3 at 128 workers): 45 curves of up to 4 des runs
# each on 2 shared cores (docs/benchmarks.md). CAPACITY_FLAGS= runs the
# command's fuller defaults. GPU+L1+L2 shares a CAPACITY_L2_GB L2.
CAPACITY_TRACE_MAX ?= 1000
CAPACITY_MAX_PROBES ?= 4
CAPACITY_L2_GB ?= 1000
CAPACITY_FLAGS ?= --big-max-probes 3 --chat-users 1000 --doc-docs 128

.PHONY: bench-capacity
bench-capacity: bench-router-scale ## goodput (req/s at TTFT p90 <= SLO, queue not growing) and cost per 1K tokens per strategy x cache (GPU, +L1, +L1+L2), des mode: trace at 8, 32, 128 workers, chat and long documents at 8 -> bench/results/capacity.json, docs/img/capacity_*.png; then bench-router-scale
	$(GO) run ./tools/cmd/warmpath-bench capacity --l1-gb $(ROUTING_L1_GB) --l2-gb $(CAPACITY_L2_GB) --trace-max $(CAPACITY_TRACE_MAX) --max-probes $(CAPACITY_MAX_PROBES) $(CAPACITY_FLAGS) $(if $(TRACE),--trace $(TRACE))

.PHONY: bench-router-scale
bench-router-scale: ## the live router's CPU per request, idle CPU, RSS and Go heap in front of 8, 32, 128 fake workers, per strategy beside round robin -> bench/results/router_scale.json
	$(GO) run ./tools/cmd/bench-router-scale

.PHONY: bench
bench: bench-router bench-index bench-l2 bench-cacheserver-memory bench-routing bench-routing-shapes bench-router-scale bench-capacity ## every benchmark, then docs/benchmarks.md's results section from bench/results/*.json and the README's capacity table from capacity.json
	$(GO) run ./tools/cmd/warmpath-bench results --dir bench/results --doc docs/benchmarks.md --readme README.md

.PHONY: images
images: build ## FROM-scratch image warmpath/<name>:dev for every binary in bin/
	@scripts/images.sh bin

.PHONY: demo
demo: build ## the local stack on simulated workers: every strategy, L1 vs L1+L2 -> out/demo/ (report.md, PNGs)
	bin/warmpath-bench demo --bin-dir bin --out out/demo

.PHONY: clean
clean: ## remove bin/, dist/, and the harness' leftover containers and cached images
	rm -rf bin dist
	@if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then \
		ctrs="$$(docker ps -aq --filter 'label=io.warmpath.test=true')"; \
		if [[ -n "$$ctrs" ]]; then docker rm -f $$ctrs >/dev/null && echo "clean: removed test containers"; fi; \
		nets="$$(docker network ls -q --filter 'label=io.warmpath.test=true')"; \
		if [[ -n "$$nets" ]]; then docker network rm $$nets >/dev/null && echo "clean: removed test networks"; fi; \
		imgs="$$(docker image ls -q --filter 'label=io.warmpath.test=true' | sort -u)"; \
		if [[ -n "$$imgs" ]]; then docker image rm -f $$imgs >/dev/null && echo "clean: removed test images"; fi; \
	fi
