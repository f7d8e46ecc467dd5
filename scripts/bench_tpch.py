"""TPC-H as views (``make tpch``): every query (or ``--queries 1,3,...``) as a view under
``auto``, over DuckDB-generated data at ``--sf`` loaded into a fresh ``snapview serve``, through
``--rounds`` rounds of RF1 and RF2; after each round Spark runs every query whole over the
sources at the newest barrier (timed: the query part of a full recompute, a lower bound of one);
every view compared with Spark's batch result at every barrier (tests/tpch/suite.py), then a
markdown table: query, strategy, epoch p50 (epoch seconds of the barriers where a source
changed, summed per round), batch query p50 and their ratio.

Bounded in time: rounds stop once ``--budget-min`` minutes have passed since the start (the
table then says how many rounds ran), and every wait has a timeout.

    python scripts/bench_tpch.py --sf 0.1 --rounds 10
    python scripts/bench_tpch.py --sf 0.01 --rounds 2 --queries 1,6,12
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sf", type=float, default=0.1, help="TPC-H scale factor (default 0.1)")
    ap.add_argument("--rounds", type=int, default=10, help="RF1+RF2 rounds (default 10)")
    ap.add_argument("--queries", default="all", help="e.g. 1,3,6 (default: all 22)")
    ap.add_argument("--fraction", type=float, default=0.001, help="orders per RF (default 0.1%%)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--barrier-interval", default="2s", help="the server's (default 2s)")
    ap.add_argument("--no-full", action="store_true", help="do not time the batch queries")
    ap.add_argument(
        "--check",
        choices=("every", "rounds"),
        default="every",
        help="compare every view with Spark at every barrier (default) or only at the end of "
        "each round (the states the timed batch queries ran at; for SF 1, where a Spark run "
        "per state over sources read again from the store takes hours)",
    )
    ap.add_argument(
        "--driver-memory",
        default="6g",
        help="the Spark driver's heap (default 6g: the oracle "
        "holds every source as a local relation)",
    )
    ap.add_argument(
        "--budget-min", type=float, default=90.0, help="no new round after this (default 90)"
    )
    args = ap.parse_args(argv)

    import coordinator
    import spark_sink
    from snapview.embedded import EmbeddedServer
    from snapview.local_spark import local_session
    from tests.tpch import queries as Q
    from tests.tpch import suite
    from tests.tpch.data import TpchData

    qs = Q.select(args.queries)
    t0 = time.monotonic()
    deadline = t0 + args.budget_min * 60

    def log(msg: str) -> None:
        print(f"[{time.monotonic() - t0:7.1f}s] {msg}", flush=True)

    with tempfile.TemporaryDirectory(prefix="bench_tpch_") as d:
        # The check reads the sources at every state since the first barrier, at the end:
        # history must outlive the run (the default --retention, 10m, does not).
        keep = f"{int(args.budget_min * 2) + 60}m"
        srv = EmbeddedServer(
            d, extra_args=["--barrier-interval", args.barrier_interval, "--retention", keep]
        ).start()
        spark = local_session(
            app_name="bench-tpch", settings={"spark.driver.memory": args.driver_memory}
        )
        spark_sink.register(spark)
        try:
            with coordinator.connect(srv.address) as c:
                data = TpchData(args.sf, seed=args.seed)
                log(f"generated SF {args.sf}: {data.rows('lineitem')} lineitems")
                data.load(c, spark, srv.address)
                log("loaded: " + ", ".join(f"{t} {s:.1f}s" for t, s in data.load_seconds.items()))
                res = suite.run(
                    spark,
                    c,
                    srv.address,
                    data,
                    qs,
                    args.rounds,
                    fraction=args.fraction,
                    full=not args.no_full,
                    timeout=max(600.0, args.budget_min * 60),
                    log=log,
                    deadline=deadline,
                    every_barrier=args.check == "every",
                )
                done = len(data.refreshes) // 2
                print()
                print(
                    f"TPC-H SF {args.sf}, {done} of {args.rounds} rounds of RF1+RF2 "
                    f"({args.fraction:.2%} of orders each), every view equal to Spark at "
                    f"{'every barrier' if args.check == 'every' else 'the end of every round'}; phases: "
                    + ", ".join(f"{k} {v:.0f}s" for k, v in res.seconds.items())
                )
                print()
                print(suite.markdown(res, qs))
                inc = [q.name for q in qs if res.runs[q.name].used == "incremental"]
                print()
                print(f"{len(inc)} of {len(qs)} incremental: {', '.join(inc) or 'none'}")
        finally:
            spark.stop()
            srv.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
