"""The driver of test_standalone_cluster's large-change test, run as a subprocess against a Spark
standalone cluster of two workers (set up as for tests/spark/cluster_job.py):

    python -m tests.spark.cluster_big_delta spark://127.0.0.1:PORT

It loads ``acc`` (CLUSTER_CHANGES rows, default 1,000,000, written by the executors) and
``names``, builds cluster_job's view (a join and an aggregate) twice, once kept incrementally
with its deltas on the executors (SNAPVIEW_DELTA_ON=executors, set here: this process is the
test's own driver) and once by full recompute, then rewrites every row of ``acc`` in one epoch
(each row to another group: one barrier of CLUSTER_CHANGES changed keys) and maintains both
views through that barrier, one after the other. Both must equal Spark's batch result of the
query at that barrier. It prints one ``RESULT {json}`` line: each view's epoch seconds, where
its delta ran and why, and whether it equalled Spark."""

from __future__ import annotations

import json
import os
import sys
import time

import coordinator
import spark_sink
from coordinator import ConnectionSettings
from spark_sink import EpochWriter, MaterializedView
from tests.spark.cluster_job import QUERY, session, spark_result

ROWS = int(os.environ.get("CLUSTER_CHANGES", "1000000"))
GROUPS = 1_000


def record_slowest_epoch(view) -> dict:
    """A dict that holds, once the view's epochs ran, the slowest one's seconds, where it ran
    and why, and its changes and mutations (the barrier that held the change: the others are
    empty)."""
    s = view._strategy
    inner = s.maintain
    got: dict = {"epoch_s": -1.0}

    def maintain(barrier, reads):
        inner(barrier, reads)
        p = s.progress
        if p.last_epoch_s > got["epoch_s"]:
            got.update(
                epoch_s=round(p.last_epoch_s, 2),
                path=getattr(s, "path", "") or "full recompute",
                why=p.last_why,
                changes=p.last_changes,
                mutations=p.last_mutations,
            )

    s.maintain = maintain
    return got


def main() -> None:
    master = sys.argv[1]
    os.environ["SNAPVIEW_DELTA_ON"] = "executors"
    t0 = time.monotonic()
    settings = ConnectionSettings.from_env()
    spark = session(master, executor_memory="768m")
    spark_sink.register(spark)
    out: dict = {"rows": ROWS, "steps": {}, "views": {}}

    def step(name: str) -> None:
        out["steps"][name] = round(time.monotonic() - t0, 1)
        print(f"cluster_big_delta: {name} at {out['steps'][name]} s", file=sys.stderr, flush=True)

    c = coordinator.connect(settings)
    c.create_table("acc", "id BIGINT, g BIGINT, v BIGINT", primary_key=["id"])
    c.create_table("names", "g BIGINT, name STRING", primary_key=["g"])
    with c.transaction() as t:
        for g in range(GROUPS):
            t.put("names", {"g": g, "name": f"group {g}"})
    df = spark.range(0, ROWS, numPartitions=8).selectExpr("id", f"id % {GROUPS} AS g", "id AS v")
    EpochWriter(settings, table="acc")(df, 0)
    step("loaded")
    views = {
        name: MaterializedView.builder(spark)
        .connection(settings)
        .query(QUERY)
        .target(f"v_{name}")
        .strategy(strategy)
        .build()
        for name, strategy in (("executors", "auto"), ("full", "full_recompute"))
    }
    ts = c.tso()
    for v in views.values():
        v.maintain_available(until=ts, timeout=1200)
    step("built")
    # every row to another group, with another value: one epoch, ROWS changed keys
    up = spark.range(0, ROWS, numPartitions=8).selectExpr(
        "id", f"(id + 1) % {GROUPS} AS g", "id * 3 AS v"
    )
    EpochWriter(settings, table="acc")(up, 1)
    step("changed")
    ts = c.tso()
    for name, v in views.items():
        slowest = record_slowest_epoch(v)
        started = time.monotonic()
        v.maintain_available(until=ts, timeout=1800)
        took = time.monotonic() - started
        b = c.snapshot([v.target]).barrier
        snap = c.snapshot(["acc", "names", v.target], barrier=b)
        got = sorted(tuple(r.values()) for r in snap.read(v.target).to_pylist())
        want = spark_result(spark, settings, snap)
        out["views"][name] = {
            "barrier": b,
            "seconds": round(took, 2),
            **slowest,
            "rows": len(got),
            "equal": got == want,
        }
        step(f"maintained {name}")
    c.close()
    print("RESULT " + json.dumps(out), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
