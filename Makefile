# Every target sets itself up: a missing .venv is created and filled first.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.DEFAULT_GOAL := help
.PHONY: help run test unit integration lint bench clean system compiled
.PHONY: serve run-kafka

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml cameo_actors/runtime/_private/executor/_kafka_records.c
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' || \
	  { echo "cameo needs Python 3.11 (found: $$($(PYTHON) --version 2>&1)). Install python3.11 or set PYTHON=/path/to/python3.11."; exit 1; }
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

system:  ## install the Debian packages needed (Java 17 for Spark, Prometheus) if missing
	@bash .ci/system-deps

run: $(STAMP) compiled system  ## the main demo: files -> Spark -> two tenants on the pool -> Spark -> Parquet
	$(PY) -m cameo_actors.demo --spark

run-kafka: $(STAMP) compiled  ## the Kafka demo: a local Kafka-protocol broker -> two tenants on the pool -> Kafka, latency produce to consume
	$(PY) -m cameo_actors.demo --kafka

test: unit integration  ## the whole suite: unit, then integration on real Ray and Spark

# Our modules compiled ahead, kept fresh: where PYTHONDONTWRITEBYTECODE is set (this machine
# sets it), every process (each Ray worker, each test process) compiled them again at import,
# 0.4 s of each actor's start. (pip compiles the packages it installs.)
compiled: $(STAMP)
	@$(PY) -m compileall -q -j 0 cameo_actors spark_ingest bench corpora tests > /dev/null

unit: $(STAMP) compiled  ## unit tests only (no Ray, no Spark, no sleeps), in one process per core
	$(PY) -m pytest -q -n auto --durations=10 tests/unit

integration: $(STAMP) compiled system  ## integration tests on a real local Ray and Spark (one of each, shared)
	$(PY) -m pytest -q --durations=25 tests/integration

lint: $(STAMP)  ## ruff, mypy (strict on the runtime and the service), and the architecture's import contracts (import-linter)
	$(PY) -m ruff check cameo_actors spark_ingest tests bench corpora
	$(PY) -m mypy cameo_actors spark_ingest corpora
	$(PY) -m mypy --strict cameo_actors/runtime cameo_actors/service
	$(VENV)/bin/lint-imports --no-logo

serve: $(STAMP) compiled  ## the service: embedded Ray, API and /metrics on 127.0.0.1:8470 (docs/service.md)
	$(VENV)/bin/cameo serve

BENCH := $(VENV)/.bench-installed
$(BENCH): pyproject.toml $(STAMP)
	$(PY) -m pip install -q -e '.[dev,bench]'
	touch $(BENCH)

bench: $(BENCH)  ## benchmarks: scenarios (single, multi, spike, fair, overload; plots; tenant mixes near capacity, random mixes, placement; the paper's single-tenant shape), the cost of a push, overhead, throughput (1, 2, 4 executors; three nodes on loopback and in network namespaces), service, migration, recovery, self-scaling (plot; capped executors), critical paths, Nexmark (and on 1, 2, 4 executors), Kafka (and its demo); their JSON in bench/results/, the docs' tables written from it (docs/benchmarks.md)
	mkdir -p bench/out
	$(PY) -m bench.cameo --scenario all --repeat 3 --json bench/results/cameo.json --plots docs/bench
	$(PY) -m bench.cameo --scenario mix --json bench/results/cameo_mix.json
	$(PY) -m bench.cameo --scenario random --mixes 3 --json bench/results/cameo_random.json
	$(PY) -m bench.cameo --scenario skew --repeat 2 --json bench/results/cameo_skew.json
	$(PY) -m bench.push_cost --json bench/results/push_cost.json
	$(PY) -m bench.admission --rounds 3 --json bench/results/admission.json
	$(PY) -m bench.placement --rounds 4 --json bench/results/placement.json
	$(PY) -m bench.sched_overhead --json bench/results/sched_overhead.json
	$(PY) -m bench.throughput --repeat 3 --json bench/results/throughput.json
	$(PY) -m bench.network --json bench/results/network.json
	$(PY) -m bench.kafka --json bench/results/kafka.json
	$(PY) -m bench.multitenant --json bench/out/multitenant.json
	$(PY) -m bench.service --quick --json bench/results/service.json
	$(PY) -m bench.migration --quick --backends memory,rocksdb --json bench/results/migration.json --plots docs/bench
	$(PY) -m bench.recovery --quick --standby 1 --json bench/results/recovery.json
	$(PY) -m bench.recovery --sizes large --parts recovery --standby 1 --json bench/results/recovery_100mb.json
	$(PY) -m bench.scaling --parts steps,hot --json bench/results/scaling.json --plots docs/bench
	$(PY) -m bench.scaling --parts capped --json bench/results/scaling_capped.json
	$(PY) -m bench.critical_path --rounds 5 --json bench/results/critical_path.json
	$(PY) -m bench.nexmark --executors 1 --json bench/results/nexmark.json
	$(PY) -m bench.nexmark --query q4 q5 q8 --events 150000 --json bench/results/nexmark_scale.json
	$(PY) -m bench.report

# PyFlink in its own venv: apache-flink pins pandas, pyarrow and numpy older than ours.
FLINK_VENV := .venv-peers/flink
FLINK_REQUIREMENTS := apache-flink==2.3.0
$(FLINK_VENV)/.installed:
	test -d $(FLINK_VENV) || $(PYTHON) -m venv $(FLINK_VENV)
	$(FLINK_VENV)/bin/pip install -q $(FLINK_REQUIREMENTS)
	touch $@

.PHONY: bench-peers
bench-peers: $(BENCH) $(FLINK_VENV)/.installed system  ## cameo next to Spark (FAIR pools), PyFlink and Bytewax
	$(PY) -m bench.peers --json bench/results/peers.json
	$(PY) -m bench.report

.PHONY: bench-spark
bench-spark: $(STAMP) system  ## Spark tier: events/s into the runtime, latency per trigger (docs/spark.md), the make run demo measured
	$(PY) -m bench.spark_throughput --repeat 3 --json bench/results/spark_throughput.json
	$(PY) -m bench.spark_throughput --repeat 3 --format parquet --json bench/results/spark_throughput_parquet.json
	$(PY) -m bench.spark_latency --json bench/results/spark_latency.json
	$(PY) -m bench.demo --json bench/results/demo.json
	$(PY) -m bench.report

clean:  ## remove the venv and run folders
	rm -rf $(VENV) .venv-peers .run .pytest_cache .hypothesis
