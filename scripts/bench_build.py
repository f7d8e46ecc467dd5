"""An incremental view's first build against Spark running the same query and writing its
result to a new table, side by side in one run (issue 26, item 4).

    .venv/bin/python scripts/bench_build.py [--sizes 1000000] [--views agg,fk,nk] [--runs 3]

For each size N the sources of ``scripts/bench_views.py`` are loaded (``orders`` N rows,
``customers`` 100,000, ``shipments`` N/2). Then, per run and per view (``agg``, ``fk``, ``nk``
and the others of bench_views' ``--views``), in alternating order:

- **spark**: the query run by Spark over the same sources (read through the ``snapview`` data
  source at one timestamp) and its result written with ``df.write.format("snapview")`` into a
  new table with the view's primary key: what a user pays to compute the result once.
- **build**: a new ``MaterializedView`` (``strategy("incremental")``) over the same query and
  key, maintained through one barrier: its first build, which writes the view and every state
  table the incremental epochs need.

Printed per view: each run's two times and the build's steps, then the medians and the ratio
build / spark (the target is at most 1.5). Every run uses new table names, so each build is a
first build into empty tables. Rows of the build's view are checked to equal the spark table's
(row count and a sum), so a build that wrote nothing cannot look fast.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_views  # noqa: E402

import coordinator  # noqa: E402
from snapview.embedded import EmbeddedServer  # noqa: E402
from snapview.local_spark import local_session  # noqa: E402


def spark_write(spark, address: str, client, query: str, key: str, target: str) -> float:
    """Seconds to run ``query`` on Spark and write its result into a new table ``target``."""
    t0 = time.perf_counter()
    df = spark.sql(query)
    schema = ", ".join(f"{f.name} {f.dataType.simpleString().upper()}" for f in df.schema.fields)
    client.create_table(target, schema, [key])
    (
        df.write.format("snapview")
        .option("coordinator", address)
        .option("table", target)
        .mode("append")
        .save()
    )
    return time.perf_counter() - t0


def view_build(spark, address: str, client, query: str, key: str, target: str):
    """(seconds, steps) of a new incremental view's first build."""
    from spark_sink import MaterializedView

    v = (
        MaterializedView.builder(spark)
        .coordinator(address)
        .query(query)
        .target(target)
        .primary_key(key)
        .strategy("incremental")
        .build()
    )
    v._strategy = v._make_strategy(client)  # what maintain_available makes first
    rec = bench_views.Recorder(v)  # records the build's epoch (later barriers are deltas)
    v.maintain_available(until=client.tso(), timeout=3600)
    builds = [e for e in rec.take() if e["strategy"] == "build"]
    assert len(builds) == 1, builds
    return builds[0]["epoch_s"], builds[0]["steps"]


def fingerprint(spark, address: str, table: str) -> tuple:
    """(rows, sum of the first numeric column) of ``table``, read at its newest version."""
    from pyspark.sql import functions as F

    df = spark.read.format("snapview").option("coordinator", address).option("table", table)
    df = df.load()
    num = next(f.name for f in df.schema.fields if f.dataType.typeName() in ("long", "integer"))
    row = df.agg(F.count(F.lit(1)), F.sum(num)).collect()[0]
    return int(row[0]), int(row[1] or 0)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1000000")
    ap.add_argument("--views", default="agg,fk,nk")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    views = [v for v in args.views.split(",") if v]
    sizes = [int(s) for s in args.sizes.split(",") if s]
    srv = EmbeddedServer().start()
    spark = local_session()
    import spark_sink

    spark_sink.register(spark)
    try:
        c = coordinator.connect(srv.address)
        for n in sizes:
            secs = bench_views.load(srv.address, n, 1)
            print(f"size {n:,}: loaded in {secs:.1f}s", flush=True)
            at = c.tso()
            for t in bench_views.names(n).values():
                (
                    spark.read.format("snapview")
                    .option("coordinator", srv.address)
                    .option("table", t)
                    .option("at", str(at))
                    .load()
                    .createOrReplaceTempView(t)
                )
            qs = bench_views.queries(n)
            got: dict[str, dict[str, list]] = {v: {"spark": [], "build": []} for v in views}
            for run in range(args.runs):
                for v in views:
                    q, key = qs[v]
                    order = ("spark", "build") if run % 2 == 0 else ("build", "spark")
                    line = []
                    fps = {}
                    for kind in order:
                        target = f"{v}_{kind}_{n}_{run}"
                        if kind == "spark":
                            s = spark_write(spark, srv.address, c, q, key, target)
                            line.append(f"spark {s:.2f}s")
                        else:
                            s, steps = view_build(spark, srv.address, c, q, key, target)
                            st = ", ".join(f"{k} {x:.2f}" for k, x in steps.items())
                            line.append(f"build {s:.2f}s ({st})")
                        got[v][kind].append(s)
                        fps[kind] = fingerprint(spark, srv.address, target)
                    if fps["spark"] != fps["build"]:
                        raise SystemExit(f"{v}: the build's view {fps['build']} != {fps['spark']}")
                    print(f"  run {run + 1} {v}: " + "; ".join(line), flush=True)
            print(f"size {n:,}: medians of {args.runs} run(s)")
            print(f"{'view':>6} {'spark':>9} {'build':>9} {'build/spark':>12}")
            for v in views:
                s = statistics.median(got[v]["spark"])
                b = statistics.median(got[v]["build"])
                print(f"{v:>6} {s:8.2f}s {b:8.2f}s {b / s:11.2f}x", flush=True)
        c.close()
    finally:
        spark.stop()
        srv.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
