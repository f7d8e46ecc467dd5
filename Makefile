# Every target does its own set-up: a fresh clone needs only python3 (>= 3.11) and Java 17.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
PACKAGES := kvstore coordinator spark_source spark_sink snapview

.PHONY: test demo proto lint typecheck fmt bench chaos differential tpch soak lifecycle cluster install-check clean

# The generated protobuf code (snapview_proto/) is committed: installing needs no code generator.
$(STAMP): pyproject.toml requirements.lock
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c requirements.lock -e '.[dev]'
	touch $@

# Regenerate snapview_proto/ from proto/ (commit the result; `make lint` checks it matches).
proto: $(STAMP)
	$(PY) scripts/gen_protos.py

# Spark's Python workers must run this venv's interpreter.
export PYSPARK_PYTHON := $(abspath $(PY))

# Everything but the standalone-cluster test (`make cluster`).
test: lint
	$(PY) -m pytest tests -q -m 'not cluster' --durations=15

demo: $(STAMP)
	$(PY) -m snapview.cli demo bank

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) scripts/gen_protos.py --check
	$(VENV)/bin/mypy $(PACKAGES)

typecheck: $(STAMP)
	$(VENV)/bin/mypy $(PACKAGES)

fmt: $(STAMP)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

bench: $(STAMP)
	$(PY) scripts/bench_tso.py --runs 3
	$(PY) scripts/bench_store.py --runs 3
	$(PY) scripts/bench_spark.py --runs 3
	$(PY) scripts/bench_freshness.py --runs 3

# The long chaos run (30 minutes; executors in their own processes so they can be killed too).
# `make test` runs a short seeded one.
chaos: $(STAMP)
	$(PY) -m snapview.cli chaos --workload bank --duration 30m --seed 1 --master 'local-cluster[2,1,1024]'
	$(PY) -m snapview.cli chaos --workload append --duration 5m --seed 2

# The long differential run: incremental views against Spark's batch result at every barrier,
# 60 rounds of the seeded workload (`make test` runs 6). SNAPVIEW_DIFF_SEED=n for another seed.
differential: $(STAMP)
	SNAPVIEW_DIFF_ROUNDS=$${SNAPVIEW_DIFF_ROUNDS:-60} $(PY) -m pytest -q -o timeout=3600 \
		tests/spark/test_incremental.py -k equal_spark

# TPC-H as views (tests/tpch): the 22 queries under auto over DuckDB-generated data at SF 0.1,
# 10 rounds of RF1/RF2, every view equal to Spark at every barrier; prints a table of epoch
# times beside Spark's batch run of each query at each round (`make test` runs a short one).
# TPCH_SF=, TPCH_ROUNDS=, TPCH_QUERIES=1,3,6 for others.
tpch: $(STAMP)
	$(PY) scripts/bench_tpch.py --sf $${TPCH_SF:-0.1} --rounds $${TPCH_ROUNDS:-10} \
		--queries $${TPCH_QUERIES:-all}

# The long GC soak: steady updates, a view, leased readers and a 4 s retention for 5 minutes;
# the data dir must stop growing (`make test` runs it for 45 s). SNAPVIEW_SOAK_S=n for another.
soak: $(STAMP)
	SNAPVIEW_SOAK_S=$${SNAPVIEW_SOAK_S:-300} $(PY) -m pytest -q -s -o timeout=3600 \
		tests/spark/test_gc_soak.py -k stops_growing

# The long lifecycle walk (tests/lifecycle, docs/design.md section 9): a seeded random walk over
# what users do (tables, views, loads, streams, restarts, forks, revisions, GC) checked against
# a model after every step; stops by itself after LIFECYCLE_S seconds (default 30 minutes).
# SEED=n for another seed; a failure prints the seed and the shrunk sequence to replay.
# `make test` runs a short seeded one (tests/lifecycle/test_walk.py).
lifecycle: $(STAMP)
	LIFECYCLE_S=$${LIFECYCLE_S:-1800} SEED=$${SEED:-1} $(PY) -m tests.lifecycle

# View jobs on a real Spark standalone cluster (docs/cluster.md): a master and two workers from
# the pip package's spark-class on 127.0.0.1, `snapview serve` with TLS and a token, executors
# over gRPC only. About 2 minutes, so not part of `make test`.
cluster: $(STAMP)
	$(PY) -m pytest -q -s -m cluster tests/spark/test_standalone_cluster.py

# What a user without make gets: `pip install` of a clean copy of this tree into a fresh venv
# (no editable install, no dev extras), then the console script and the client import.
install-check:
	scripts/install_check.sh $(PYTHON)

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache
