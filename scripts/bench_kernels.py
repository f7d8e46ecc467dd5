"""The kernel library of the columnar engine, chosen by measurement (issue 26): the three kernels
an epoch runs over Arrow, each timed in pyarrow (compute and Acero, a dependency already) and in
the in-process engines a user might expect instead (DuckDB, Polars, DataFusion), side by side in
one run, Arrow in and Arrow out (the conversions are part of the cost: the engine's inputs are
decoded into Arrow and its outputs are encoded from Arrow).

1. ``join``: the fk view's delta term: a change of N orders (id, customer, amount, grp, weight)
   joined with the customers looked up by key (one row per distinct customer), those with
   region < 2 kept, projected to the view's columns with the weight.
2. ``fold``: an aggregate's fold: per group of the change (10,000 groups), the sum of
   weight * amount and the sum of weights.
3. ``consolidate``: the view's change consolidated: grouped on all five columns, weights summed,
   zero sums dropped.

Each at N = 1,000 and 100,000 changed rows; the figure is the median of --repeat runs after two
warm-up runs. The peers are installed on demand into ~/.cache/snapview/kernels (``pip install
--target``), not into this environment and not as dependencies; one that cannot be installed is
left out of the table. Every engine's result is checked against pyarrow's (row counts and
sums) before its time is printed.

    .venv/bin/python scripts/bench_kernels.py --repeat 15
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.acero as acero
import pyarrow.compute as pc

CACHE = Path.home() / ".cache" / "snapview" / "kernels"
PEERS = {"duckdb": "duckdb", "polars": "polars", "datafusion": "datafusion"}


def ensure(module: str) -> Any:
    """``module`` imported, installed into CACHE first if missing; None if it cannot be."""
    if str(CACHE) not in sys.path:
        sys.path.append(str(CACHE))  # last: this environment's pyarrow stays the one loaded
    try:
        return __import__(module)
    except ImportError:
        pass
    print(f"  (installing {PEERS[module]} into {CACHE})", flush=True)
    r = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--target", str(CACHE), PEERS[module]],
        capture_output=True,
        text=True,
    )
    if r.returncode != 0:
        print(f"  {module} could not be installed: {r.stderr.strip()[-300:]}", flush=True)
        return None
    try:
        return __import__(module)
    except ImportError as e:
        print(f"  {module} installed but not importable: {e}", flush=True)
        return None


def inputs(n: int, seed: int = 7) -> dict[str, pa.Table]:
    rng = random.Random(seed)
    customers = 100_000
    change = pa.table(
        {
            "id": pa.array([rng.randrange(1_000_000) for _ in range(n)], pa.int64()),
            "customer": pa.array([rng.randrange(customers) for _ in range(n)], pa.int64()),
            "amount": pa.array([rng.randrange(1, 10_000) for _ in range(n)], pa.int64()),
            "grp": pa.array([rng.randrange(10_000) for _ in range(n)], pa.int32()),
            "w": pa.array([rng.choice((-1, 1)) for _ in range(n)], pa.int64()),
        }
    )
    ids = sorted(set(change["customer"].to_pylist()))
    looked = pa.table(
        {
            "cid": pa.array(ids, pa.int64()),
            "region": pa.array([rng.randrange(4) for _ in ids], pa.int32()),
            "name": pa.array([f"c{i}" for i in ids], pa.string()),
        }
    )
    joined = change.join(looked, "customer", "cid", join_type="inner", use_threads=False)
    view = joined.select(["id", "amount", "grp", "region", "name", "w"])
    # the view's change holds each row retracted and emitted about as often as it is new
    view = pa.concat_tables([view, view.slice(0, n // 2)])
    return {"change": change, "looked": looked, "view": view}


# ---------------------------------------------------------------------- pyarrow (Acero)


def arrow_join(t: dict[str, pa.Table]) -> pa.Table:
    cust = t["looked"]
    plan = acero.Declaration.from_sequence(
        [
            acero.Declaration("table_source", acero.TableSourceNodeOptions(cust)),
            acero.Declaration("filter", acero.FilterNodeOptions(pc.field("region") < 2)),
        ]
    )
    kept = plan.to_table(use_threads=False)
    j = t["change"].join(kept, "customer", "cid", join_type="inner", use_threads=False)
    return j.select(["id", "amount", "grp", "region", "name", "w"])


def arrow_fold(t: dict[str, pa.Table]) -> pa.Table:
    c = t["change"]
    wa = pc.multiply_checked(c["w"], c["amount"])
    x = pa.table({"grp": c["grp"], "wa": wa, "w": c["w"]})
    return x.group_by("grp", use_threads=False).aggregate([("wa", "sum"), ("w", "sum")])


def arrow_consolidate(t: dict[str, pa.Table]) -> pa.Table:
    v = t["view"]
    cols = ["id", "amount", "grp", "region", "name"]
    out = v.group_by(cols, use_threads=False).aggregate([("w", "sum")])
    return out.filter(pc.not_equal(out["w_sum"], 0))


# ---------------------------------------------------------------------- peers

SQL = {
    "join": "SELECT o.id, o.amount, o.grp, c.region, c.name, o.w FROM change o "
    "JOIN looked c ON o.customer = c.cid WHERE c.region < 2",
    "fold": "SELECT grp, SUM(w * amount) AS wa, SUM(w) AS w FROM change GROUP BY grp",
    "consolidate": "SELECT id, amount, grp, region, name, SUM(w) AS w FROM view "
    "GROUP BY id, amount, grp, region, name HAVING SUM(w) <> 0",
}


def duckdb_kernels(duckdb: Any) -> dict[str, Callable[[dict[str, pa.Table]], pa.Table]]:
    con = duckdb.connect()

    def run(kernel: str) -> Callable[[dict[str, pa.Table]], pa.Table]:
        def f(t: dict[str, pa.Table]) -> pa.Table:
            for name, table in t.items():
                con.register(name, table)
            rel = con.sql(SQL[kernel])
            return rel.to_arrow_table() if hasattr(rel, "to_arrow_table") else rel.arrow()

        return f

    return {k: run(k) for k in SQL}


def polars_kernels(pl: Any) -> dict[str, Callable[[dict[str, pa.Table]], pa.Table]]:
    def join(t: dict[str, pa.Table]) -> pa.Table:
        o, c = pl.from_arrow(t["change"]), pl.from_arrow(t["looked"])
        out = o.join(c.filter(pl.col("region") < 2), left_on="customer", right_on="cid")
        return out.select(["id", "amount", "grp", "region", "name", "w"]).to_arrow()

    def fold(t: dict[str, pa.Table]) -> pa.Table:
        o = pl.from_arrow(t["change"])
        return (
            o.group_by("grp")
            .agg((pl.col("w") * pl.col("amount")).sum().alias("wa"), pl.col("w").sum())
            .to_arrow()
        )

    def consolidate(t: dict[str, pa.Table]) -> pa.Table:
        v = pl.from_arrow(t["view"])
        out = v.group_by(["id", "amount", "grp", "region", "name"]).agg(pl.col("w").sum())
        return out.filter(pl.col("w") != 0).to_arrow()

    return {"join": join, "fold": fold, "consolidate": consolidate}


def datafusion_kernels(df: Any) -> dict[str, Callable[[dict[str, pa.Table]], pa.Table]]:
    def run(kernel: str) -> Callable[[dict[str, pa.Table]], pa.Table]:
        def f(t: dict[str, pa.Table]) -> pa.Table:
            ctx = df.SessionContext()
            for name, table in t.items():
                ctx.register_record_batches(name, [table.to_batches()])
            return ctx.sql(SQL[kernel]).to_arrow_table()

        return f

    return {k: run(k) for k in SQL}


# ---------------------------------------------------------------------- timing


def check(engine: str, kernel: str, got: pa.Table, want: pa.Table) -> None:
    """The same number of rows and the same total weight (and weighted sum) as pyarrow's."""

    def total(t: pa.Table, col: str) -> int:
        return int(pc.sum(t[col]).as_py() or 0)

    w = "w" if "w" in want.column_names else "w_sum"
    gw = "w" if "w" in got.column_names else "w_sum"
    same = got.num_rows == want.num_rows and total(got, gw) == total(want, w)
    if kernel == "fold":
        same = same and total(got, "wa" if "wa" in got.column_names else "wa_sum") == total(
            want, "wa_sum"
        )
    if not same:
        raise AssertionError(f"{engine} {kernel}: {got.num_rows} rows vs {want.num_rows}")


def timed(f: Callable[[], Any], repeat: int) -> float:
    for _ in range(2):
        f()
    xs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        f()
        xs.append(time.perf_counter() - t0)
    return statistics.median(xs)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1000,100000")
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--peers", default="duckdb,polars,datafusion")
    args = ap.parse_args()
    ours = {"join": arrow_join, "fold": arrow_fold, "consolidate": arrow_consolidate}
    engines: dict[str, dict[str, Callable[[dict[str, pa.Table]], pa.Table]]] = {"pyarrow": ours}
    makers = {"duckdb": duckdb_kernels, "polars": polars_kernels, "datafusion": datafusion_kernels}
    for name in [p for p in args.peers.split(",") if p]:
        mod = ensure(name)
        if mod is not None:
            engines[name] = makers[name](mod)
            print(f"  {name} {getattr(mod, '__version__', '?')}", flush=True)
    print(f"  pyarrow {pa.__version__}; {os.cpu_count()} cores; medians of {args.repeat} runs")
    print(f"  {'kernel':<12} {'rows':>8} " + " ".join(f"{e:>11}" for e in engines) + "  (ms)")
    for n in [int(x) for x in args.sizes.split(",")]:
        t = inputs(n)
        for kernel in ("join", "fold", "consolidate"):
            want = ours[kernel](t)
            row = []
            for e, ks in engines.items():
                check(e, kernel, ks[kernel](t), want)
                row.append(timed(lambda f=ks[kernel], t=t: f(t), args.repeat) * 1e3)
            base = row[0]
            print(
                f"  {kernel:<12} {n:>8,} "
                + " ".join(f"{x:>11.2f}" for x in row)
                + "   speed against pyarrow (>1: faster): "
                + ", ".join(
                    f"{e} {base / x:.2f}x" for e, x in zip(list(engines)[1:], row[1:], strict=True)
                )
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
