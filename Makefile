# Every target sets itself up: a missing .venv is created and filled first.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.DEFAULT_GOAL := help
.PHONY: help run test unit integration lint bench clean check-java

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' || \
	  { echo "cameo needs Python 3.11 (found: $$($(PYTHON) --version 2>&1)). Install python3.11 or set PYTHON=/path/to/python3.11."; exit 1; }
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

check-java:  ## check that Java 17+ is there (Spark 4 needs it)
	@bash .ci/check-java

run: $(STAMP) check-java  ## the main demo: two tenants' dataflows
	$(PY) -m cameo_actors.demo

test: $(STAMP) check-java  ## the whole suite: unit, then integration on real Ray and Spark
	$(PY) -m pytest -q tests

unit: $(STAMP)  ## unit tests only (no Ray, no Spark, no sleeps)
	$(PY) -m pytest -q tests/unit

lint: $(STAMP)  ## ruff and mypy
	$(PY) -m ruff check cameo_actors spark_ingest tests bench
	$(PY) -m mypy cameo_actors spark_ingest

bench: $(STAMP)  ## benchmarks (see bench/README)
	$(PY) -m bench.throughput

clean:  ## remove the venv and run folders
	rm -rf $(VENV) .run .pytest_cache .hypothesis
