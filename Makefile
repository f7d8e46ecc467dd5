# Every target does its own set-up: a fresh clone needs only python3 (>= 3.11) and Java 17.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
PROTO_STAMP := snapview_proto/.generated-stamp
PROTOS := $(wildcard proto/snapview/v1/*.proto)

.PHONY: test demo proto lint fmt bench chaos clean

$(STAMP): pyproject.toml requirements.lock
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c requirements.lock grpcio-tools
	$(PY) scripts/gen_protos.py
	$(PY) -m pip install -q -c requirements.lock -e '.[dev]'
	touch $@

$(PROTO_STAMP): $(STAMP) $(PROTOS) scripts/gen_protos.py
	$(PY) scripts/gen_protos.py
	touch $@

proto: $(PROTO_STAMP)

# Spark's Python workers must run this venv's interpreter.
export PYSPARK_PYTHON := $(abspath $(PY))

test: lint
	$(PY) -m pytest tests -q

demo: $(PROTO_STAMP)
	$(PY) -m snapview.cli demo bank

lint: $(PROTO_STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

fmt: $(PROTO_STAMP)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

bench: $(PROTO_STAMP)
	$(PY) scripts/bench_tso.py --runs 3
	$(PY) scripts/bench_store.py --runs 3
	$(PY) scripts/bench_spark.py --runs 3
	$(PY) scripts/bench_freshness.py --runs 3

# The long chaos run (30 minutes; executors in their own processes so they can be killed too).
# `make test` runs a short seeded one.
chaos: $(PROTO_STAMP)
	$(PY) -m snapview.cli chaos --workload bank --duration 30m --seed 1 --master 'local-cluster[2,1,1024]'
	$(PY) -m snapview.cli chaos --workload append --duration 5m --seed 2

clean:
	rm -rf $(VENV) snapview_proto .pytest_cache .ruff_cache
