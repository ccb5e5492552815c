# make test runs everything CI runs: deps, go vet and staticcheck on every
# module, unit tests, the harness's own tests and the integration suite on
# the docker backend and on the process backend, the PostgreSQL order
# processor's tests, a short soak, then the servers' legs: the core of the
# suite and a short soak on Valkey 8.1 and on Redis 8.0. BATCHLOCK_SERVER
# (redis-7.0, valkey-8.1 or redis-8.0) runs the rest on another server.
SHELL := bash
GO    ?= go

# The modules, tied together by replace directives in their go.mod files:
# the root (the library) first, then the order workload (of the demo, the
# bench and the suite), the harness, the suite, the operator's command, the
# demo, the examples, the OpenTelemetry adapter and the benchmarks.
MODULES     := . orders localcluster cluster_test cmd/batchlock cmd/batchlock/demo examples batchlockotel bench
STATICCHECK_VERSION := v0.8.2
STATICCHECK := $(CURDIR)/bin/staticcheck

# testcontainers' reaper needs an image from a registry; localcluster
# removes its containers itself.
export TESTCONTAINERS_RYUK_DISABLED := true

# The modules whose tests need no Redis.
UNIT_MODULES := . orders localcluster cmd/batchlock cmd/batchlock/demo batchlockotel
CLUSTER_TEST = $(GO) -C cluster_test test -count=1 -timeout 15m -skip '^TestSoak$$' ./...
# localcluster's tests on nodes of their own (TestHarness*): run on each
# backend before the suite, whose failures they vouch for; the unit tests
# leave them out.
HARNESS_TEST = $(GO) -C localcluster test -count=1 -timeout 15m -run '^TestHarness' ./...
# The randomized fault soak: SOAK is its length, SEED replays a schedule,
# SOAK_BACKEND picks the backend (default: as for the suite), SOAK_REPLICAS
# the replicas per master (default 1).
SOAK        ?= 10m
SEED        ?=
SOAK_BACKEND ?=
SOAK_REPLICAS ?= 1
SOAK_LOG    ?= $${TMPDIR:-/tmp}/batchlock-soak.log
TEST_SOAK   ?= 60s
# The servers' legs (localcluster.WithServer): besides the host's Redis 7.0,
# Debian 13's Valkey 8.1 and Redis 8.0, each running the harness's tests of
# what differs between servers, the suite's core (a test of each mechanism
# a server could change: scripts, pub/sub, WAIT, migrations, a restarted
# node, client eviction, the ACL, Check) and a short soak.
SERVERS     := valkey-8.1 redis-8.0
SERVER_HARNESS := ^TestHarness(KillRestartRejoins|TakeoverWhileMasterFrozen|MigrationHandle)$$
SERVER_CORE := ^Test(Check.*|CommandCheck|ListenersKeptFromClientEviction|LostLockFailover|LockSpansAllMasters|TryLockAllOrNothing|MutualExclusionCounters|FencingTokensGrow|BadInputTouchesNothing|HandOffInArrivalOrder|HandoffByReleaseMessage|WakeUpsSurvivePubSubReconnect|HandOffInASlotBeingMigrated|ReplicaAcknowledgement|ConsumeWithReplicasWaitsForTheSale|CountedAllOrNothingAcrossMasters|SharedHoldersOverlap|ProcessorRefusesABadBasketAlone|ProcessorCloseHandsBackAndReleases|TryEachRefusedOnOneMasterLeavesNothing|ACLUserLimitedToPrefix|SingleNodeClient)$$
COMPOSE     := $(shell if docker compose version >/dev/null 2>&1; then echo "docker compose"; \
                 elif command -v docker-compose >/dev/null 2>&1; then echo docker-compose; fi)
COMPOSE_RUN  = $(COMPOSE) -f docker/docker-compose.yml -p batchlock-dev
DEV_ADDRS    = 127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003,127.0.0.1:7004,127.0.0.1:7005

.PHONY: deps lint test test-unit test-docker test-process test-postgres test-external test-soak test-servers soak image bench demo readme \
        cluster-up cluster-down clean-containers

deps:
	@bash scripts/install-deps.sh

$(STATICCHECK):
	GOBIN=$(CURDIR)/bin $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

lint: $(STATICCHECK)
	@set -e; for m in $(MODULES); do \
		echo "gofmt, go vet, staticcheck: $$m"; \
		unformatted=$$(cd $$m && gofmt -l .); \
		if [ -n "$$unformatted" ]; then echo "gofmt: not formatted: $$unformatted"; exit 1; fi; \
		$(GO) -C $$m vet ./...; \
		(cd $$m && $(STATICCHECK) ./...); \
	done

test: deps
	$(MAKE) lint
	$(MAKE) test-unit
	$(MAKE) test-docker
	$(MAKE) test-process
	$(MAKE) test-postgres
	$(MAKE) test-soak
	$(MAKE) test-servers

test-unit:
	@set -e; for m in $(UNIT_MODULES); do $(GO) -C $$m test -race -count=1 -skip '^TestHarness' ./...; done
	$(GO) -C bench test -count=1 ./...

# Under CI=true a missing daemon fails here; elsewhere the suite skips loudly.
test-docker:
	@if ! docker info >/dev/null 2>&1; then \
		echo "test-docker: no Docker daemon answers"; \
		if [ "$${CI:-}" = true ]; then exit 1; fi; \
	fi
	env -u BATCHLOCK_CLUSTER_ADDRS BATCHLOCK_BACKEND=docker $(HARNESS_TEST)
	env -u BATCHLOCK_CLUSTER_ADDRS BATCHLOCK_BACKEND=docker $(CLUSTER_TEST)

test-process:
	env -u BATCHLOCK_CLUSTER_ADDRS BATCHLOCK_BACKEND=process $(HARNESS_TEST)
	env -u BATCHLOCK_CLUSTER_ADDRS BATCHLOCK_BACKEND=process $(CLUSTER_TEST)

# The order processor on PostgreSQL (examples/): a throwaway PostgreSQL
# server and a six-node cluster on the process backend. Under CI=true a
# server that cannot start fails the tests; elsewhere they skip loudly.
test-postgres: deps
	env -u BATCHLOCK_CLUSTER_ADDRS BATCHLOCK_BACKEND=process $(GO) -C examples test -race -count=1 -timeout 10m ./...

# A short soak on one backend, as part of make test.
test-soak:
	$(MAKE) soak SOAK=$(TEST_SOAK) SOAK_BACKEND=process

test-servers: deps
	@set -e; for s in $(SERVERS); do \
		echo "== $$s: the harness, the suite's core, a $(TEST_SOAK) soak (process backend)"; \
		on="env -u BATCHLOCK_CLUSTER_ADDRS BATCHLOCK_SERVER=$$s BATCHLOCK_BACKEND=process"; \
		$$on $(GO) -C localcluster test -count=1 -timeout 15m -run '$(SERVER_HARNESS)' ./...; \
		$$on $(GO) -C cluster_test test -count=1 -timeout 15m -run '$(SERVER_CORE)' ./...; \
		BATCHLOCK_SERVER=$$s $(MAKE) --no-print-directory soak SOAK=$(TEST_SOAK) SOAK_BACKEND=process; \
	done

# The whole output goes to SOAK_LOG; the soak's own lines are shown, the
# last of them its verdict: "soak: <n> operations, <n> faults, <n>
# violations, <n> leftovers".
soak: deps
	@set -o pipefail; log=$(SOAK_LOG); \
	env -u BATCHLOCK_CLUSTER_ADDRS $(if $(SOAK_BACKEND),BATCHLOCK_BACKEND=$(SOAK_BACKEND)) SOAK=$(SOAK) SEED=$(SEED) SOAK_REPLICAS=$(SOAK_REPLICAS) \
		$(GO) -C cluster_test test -count=1 -timeout 3h -run '^TestSoak$$' -v . >$$log 2>&1; status=$$?; \
	if [ $$status -ne 0 ]; then grep -v '^redis: ' $$log | grep -v '^soak: ' | tail -n 40; echo "(whole output: $$log)"; fi; \
	grep '^soak: ' $$log; exit $$status

# Against the dev cluster of make cluster-up; tests needing their own
# cluster skip.
test-external:
	BATCHLOCK_CLUSTER_ADDRS=$(DEV_ADDRS) $(CLUSTER_TEST)

image:
	bash docker/build-image.sh

cluster-up: image
	@test -n "$(COMPOSE)" || { echo "cluster-up: needs docker compose or docker-compose" >&2; exit 1; }
	$(COMPOSE_RUN) up -d
	$(GO) -C localcluster run ./cmd/localcluster create $(DEV_ADDRS)

cluster-down:
	@test -n "$(COMPOSE)" || { echo "cluster-down: needs docker compose or docker-compose" >&2; exit 1; }
	$(COMPOSE_RUN) down -v

# Containers a killed test binary could not remove.
clean-containers:
	@ids=$$(docker ps -aq --filter label=batchlock.localcluster=1); \
	if [ -n "$$ids" ]; then docker rm -f $$ids; else echo "clean-containers: none"; fi

# README.md is README.md.tpl with the package's Example functions in it;
# TestREADMEIsGenerated (make test-unit) fails when it drifts.
readme:
	BATCHLOCK_UPDATE_README=1 $(GO) test -count=1 -run '^TestREADMEIsGenerated$$' ./batchlock

# The main job: a batch order processor on a throwaway six-node cluster,
# audited for oversell. DEMO_FLAGS passes more, e.g. DEMO_FLAGS=--no-lock,
# or DEMO_FLAGS=--store=postgres for stock in a throwaway PostgreSQL.
demo: deps
	@$(GO) -C cmd/batchlock/demo run . $(DEMO_FLAGS)

# Benchmarks against redsync and redislock on a throwaway cluster; writes
# docs/bench.md and docs/bench-latency.svg.
bench: deps
	cd bench && $(GO) run ./cmd/benchreport --backend process
