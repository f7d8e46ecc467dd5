"""An incremental epoch's fixed cost: its steps and its server calls when nothing (or one row)
changed, per view shape (issue 26, item 5).

    .venv/bin/python scripts/bench_epoch_fixed.py [--rows 10000] [--barriers 40] [--runs 3]

Loads ``orders`` (--rows rows) and ``customers`` (1,000 rows), builds three incremental views
(``agg``: GROUP BY with COUNT/SUM/AVG; ``fk``: orders joined to customers; ``mm``: MIN/MAX per
group), then for --barriers barriers maintains every view through a barrier at which nothing
changed ("empty"), and for as many through a barrier holding a one-row update of orders ("one
row"). Printed per view and kind: the epoch's median total and median steps, and the median
count of gRPC calls one epoch makes, by method (counted in this process by wrapping the client's
call helper; reads the driver makes straight from the LMDB file, the server being on this host,
are not calls). With --runs R the barrier loops repeat R times; figures are medians over all
epochs of all runs.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import coordinator  # noqa: E402
from kvstore import remote  # noqa: E402
from snapview.embedded import EmbeddedServer  # noqa: E402
from snapview.local_spark import local_session  # noqa: E402
from spark_sink import MaterializedView  # noqa: E402
from spark_source.barrier_source import plan_rows  # noqa: E402

VIEWS = {
    "agg": (
        "SELECT grp, COUNT(*) AS n, SUM(amount) AS s, AVG(amount) AS a FROM orders GROUP BY grp",
        "grp",
    ),
    "fk": (
        "SELECT o.id, o.amount, c.region FROM orders o JOIN customers c ON o.customer = c.id "
        "WHERE c.region < 8",
        "id",
    ),
    "mm": ("SELECT grp, MIN(amount) AS lo, MAX(amount) AS hi FROM orders GROUP BY grp", "grp"),
}

CALLS: collections.Counter[str] = collections.Counter()


def count_calls() -> None:
    """Wrap the client's unary and streaming call helpers to count calls by method name."""
    unary, stream = remote.RpcCaller.unary, remote.RpcCaller.stream

    def name(method) -> str:
        full = str(getattr(method, "_name", None) or getattr(method, "__name__", method))
        return full.rsplit("/", 1)[-1]  # "/snapview.v1.KvStore/ScanChanges" -> "ScanChanges"

    def u(self, method, request, timeout_s=None):
        CALLS[name(method)] += 1
        return unary(self, method, request, timeout_s)

    def s(self, method, request):
        CALLS[name(method)] += 1
        return stream(self, method, request)

    remote.RpcCaller.unary = u  # type: ignore[method-assign]
    remote.RpcCaller.stream = s  # type: ignore[method-assign]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=10_000)
    ap.add_argument("--barriers", type=int, default=40)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="epoch_fixed_")
    srv = EmbeddedServer(tmp, extra_args=["--barrier-interval", "200ms"]).start()
    try:
        c = coordinator.connect(srv.address)
        c.create_table("orders", "id BIGINT, grp INT, customer BIGINT, amount BIGINT", ["id"])
        c.create_table("customers", "id BIGINT, region INT", ["id"])
        with c.transaction() as t:
            for i in range(1000):
                t.put("customers", {"id": i, "region": i % 10})
        for lo in range(0, args.rows, 20_000):
            with c.transaction() as t:
                for i in range(lo, min(args.rows, lo + 20_000)):
                    t.put("orders", {"id": i, "grp": i % 100, "customer": i % 1000, "amount": i})
        spark = local_session()
        views = {}
        for name, (sql, key) in VIEWS.items():
            v = (
                MaterializedView.builder(spark)
                .coordinator(srv.address)
                .query(sql)
                .target(f"v_{name}")
                .primary_key(key)
                .strategy("incremental")
                .build()
            )
            v.maintain_available(until=c.tso(), timeout=600)
            views[name] = v
        count_calls()
        figures: dict[tuple[str, str], list[dict]] = collections.defaultdict(list)

        def next_epoch(v) -> dict:
            """Maintain ``v`` through its next ready barrier alone; that epoch's figures."""
            while True:
                last = c.jobs.plan_barriers(v.job, limit=1).last_committed
                plans = c.jobs.plan_barriers(v.job, limit=1, after=last).barriers
                if plans:
                    break
                time.sleep(0.01)
            barrier, reads, _ = plan_rows(plans)[0]
            r = {t: (x[0], bool(x[1])) for t, x in json.loads(reads).items()}
            CALLS.clear()
            v._strategy.maintain(barrier, r)
            p = v._strategy.progress
            return {
                "total": p.last_epoch_s,
                **p.last_steps,
                "calls": dict(CALLS),
                "changes": p.last_changes,
            }

        for run in range(args.runs):
            for b in range(args.barriers):
                for name, v in views.items():
                    v.maintain_available()  # catch up: the next barrier is an empty one
                    got = next_epoch(v)
                    assert got["changes"] == 0, got
                    figures[(name, "empty")].append(got)
                i = (run * args.barriers + b) % args.rows
                ts0 = c.tso()
                for v in views.values():
                    v.maintain_available(until=ts0, timeout=60)
                with c.transaction() as t:
                    t.put(
                        "orders", {"id": i, "grp": i % 100, "customer": i % 1000, "amount": -1 - i}
                    )
                for name, v in views.items():
                    while True:  # barriers issued before the commit hold no change
                        got = next_epoch(v)
                        if got["changes"]:
                            break
                    figures[(name, "one row")].append(got)
        print(f"{args.rows:,} orders; {args.barriers} barriers x {args.runs} run(s) per kind")
        print(f"{'view':>5} {'kind':>8} {'p50 total':>10}  median steps; median calls per epoch")
        for (name, kind), rows in figures.items():
            steps = [k for k in rows[0] if k not in ("total", "calls", "changes")]
            med = {k: statistics.median(r.get(k, 0.0) for r in rows) for k in steps}
            methods = sorted({m for r in rows for m in r["calls"]})
            calls = {m: statistics.median(r["calls"].get(m, 0) for r in rows) for m in methods}
            total = statistics.median(r["total"] for r in rows)
            print(
                f"{name:>5} {kind:>8} {total * 1000:8.1f}ms  "
                + ", ".join(f"{k} {v * 1000:.1f}" for k, v in med.items())
                + "; "
                + ", ".join(f"{m} {n:g}" for m, n in calls.items())
                + f" (total {sum(calls.values()):g})"
            )
        spark.stop()
        c.close()
    finally:
        srv.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
