"""View freshness and full-recompute epoch time.

    .venv/bin/python scripts/bench_freshness.py [--runs 3] [--window 20] [--rate 200]
                                                [--sizes 10000,100000,1000000]
                                                [--strategy incremental] [--accounts 1000]

1. Freshness: the wall time from a source commit to its first appearance in a consistent read of
   the view. Transfers commit at --rate per second from another process (each one's commit ts and
   wall time recorded); the bench polls ``client.snapshot(["accounts", "branch_balance"])`` every
   10 ms. A commit appears once a consistent snapshot's barrier is >= its commit ts (the view's
   version at that barrier is the query over every commit at or below it). p50 and p99 per window
   of --window seconds, --runs windows, barrier interval 1 s, trigger "0 seconds". The view
   (``branch_balance``, a GROUP BY over ``accounts`` of --accounts rows) is maintained by
   --strategy (incremental, full_recompute or auto).
2. Epoch time as the source grows: a GROUP BY view over a table of each size in --sizes, with
   1,000 changed rows per barrier; the median time of a recomputing epoch (read the sources at
   the barrier, run the query on Spark, diff, write, commit), strategy full_recompute whatever
   --strategy says. This is the baseline incremental maintenance must beat
   (``scripts/bench_views.py`` measures both side by side).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import random
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import coordinator  # noqa: E402
from snapview.demos.bank import create_accounts, transfer  # noqa: E402
from snapview.embedded import EmbeddedServer  # noqa: E402
from snapview.local_spark import local_session  # noqa: E402

ACCOUNTS = 1000


def _writer(address: str, rate: float, seconds: float, out_q, accounts: int = ACCOUNTS) -> None:
    """Transfers at ``rate``/s for ``seconds``; sends back [(commit_ts, wall_ms)]."""
    c = coordinator.connect(address)
    rng = random.Random(7)
    commits = []
    next_at = time.monotonic()
    end = next_at + seconds
    while time.monotonic() < end:
        next_at += 1.0 / rate
        d = next_at - time.monotonic()
        if d > 0:
            time.sleep(d)
        cts = transfer(c, rng, accounts)
        if cts is not None:
            commits.append((cts, int(time.time() * 1000)))
    out_q.put(commits)
    c.close()


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def freshness_window(
    c, address: str, rate: float, seconds: float, accounts: int = ACCOUNTS
) -> tuple[float, float, int]:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_writer, args=(address, rate, seconds, q, accounts))
    p.start()
    polls = []  # (wall_ms, barrier)
    end = time.monotonic() + seconds + 15  # keep polling until the last commits appear
    commits = None
    while time.monotonic() < end:
        try:
            snap = c.snapshot(["accounts", "branch_balance"])
            polls.append((int(time.time() * 1000), snap.barrier))
        except coordinator.BarrierNotReached:
            pass
        if commits is None and not q.empty():
            commits = q.get()
            last = max(ts for ts, _ in commits)
            end = min(end, time.monotonic() + 10)
        if commits is not None and polls and polls[-1][1] >= last:
            break
        time.sleep(0.01)
    if commits is None:
        commits = q.get(timeout=30)
    p.join(10)
    fresh = []
    j = 0
    for cts, wall in sorted(commits):
        while j < len(polls) and polls[j][1] < cts:
            j += 1
        if j == len(polls):
            break
        fresh.append((polls[j][0] - wall) / 1000)
    return pct(fresh, 50), pct(fresh, 99), len(fresh)


def epoch_times(spark, c, address: str, size: int, barriers: int) -> float:
    from spark_sink import MaterializedView

    src = f"src_{size}"
    c.create_table(src, "id BIGINT, grp INT, v BIGINT", primary_key=["id"])
    for lo in range(0, size, 50_000):
        with c.transaction(lock_ttl_ms=60_000) as t:
            for i in range(lo, min(size, lo + 50_000)):
                t.put(src, {"id": i, "grp": i % 100, "v": i})
    job = (
        MaterializedView.builder(spark)
        .coordinator(address)
        .query(f"SELECT grp, SUM(v) AS total, COUNT(*) AS n FROM {src} GROUP BY grp")
        .target(f"agg_{size}")
        .primary_key("grp")
        .strategy("full_recompute")
        .trigger_interval("0 seconds")
        .build()
        .start()
    )
    rng = random.Random(size)
    try:
        job.await_barrier(c.tso(), timeout=600)
        job.strategy.progress.recompute_seconds.clear()
        for _ in range(barriers):
            with c.transaction(lock_ttl_ms=60_000) as t:
                for i in rng.sample(range(size), 1000):
                    t.put(src, {"id": i, "grp": i % 100, "v": rng.randint(0, 1 << 30)})
            job.await_barrier(t.commit_ts, timeout=600)
        return statistics.median(job.strategy.progress.recompute_seconds)
    finally:
        job.stop()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--window", type=float, default=20.0)
    ap.add_argument("--rate", type=float, default=200.0)
    ap.add_argument("--barrier-interval", default="1s")
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--barriers", type=int, default=5, help="epochs timed per size")
    ap.add_argument(
        "--strategy",
        default="incremental",
        help="of the freshness view: incremental, full_recompute or auto",
    )
    ap.add_argument("--accounts", type=int, default=ACCOUNTS, help="rows of the freshness source")
    ap.add_argument("--skip-epochs", action="store_true", help="measure freshness only")
    args = ap.parse_args()

    from snapview.demos.bank import BRANCHES, START_BALANCE, VIEWS
    from spark_sink import MaterializedView

    srv = EmbeddedServer(extra_args=["--barrier-interval", args.barrier_interval]).start()
    spark = local_session()
    try:
        c = coordinator.connect(srv.address)
        t0 = time.perf_counter()
        if args.accounts <= ACCOUNTS:
            create_accounts(c, args.accounts)
        else:  # large transactions: 2,000 rows each would take minutes for 1M accounts
            c.create_table("accounts", "id BIGINT, branch INT, balance BIGINT", ["id"])
            for lo in range(0, args.accounts, 50_000):
                with c.transaction(lock_ttl_ms=60_000) as t:
                    for i in range(lo, min(args.accounts, lo + 50_000)):
                        t.put(
                            "accounts", {"id": i, "branch": i % BRANCHES, "balance": START_BALANCE}
                        )
        load_s = time.perf_counter() - t0
        sql, pk = VIEWS["branch_balance"]
        job = (
            MaterializedView.builder(spark)
            .coordinator(srv.address)
            .query(sql)
            .target("branch_balance")
            .primary_key(*pk)
            .strategy(args.strategy)
            .trigger_interval("200 milliseconds")
            .build()
            .start()
        )
        bb = {"branch_balance": job}
        job.await_barrier(c.tso(), timeout=600)
        print(
            f"freshness: {args.rate:g} transfers/s, barrier interval {args.barrier_interval}, "
            f"view branch_balance over {args.accounts:,} accounts (loaded in {load_s:.1f}s), "
            f"strategy {job.strategy.name} (asked: {args.strategy}), {args.window:g}s windows"
        )
        p50s, p99s = [], []
        for run in range(args.runs):
            p50, p99, n = freshness_window(c, srv.address, args.rate, args.window, args.accounts)
            p50s.append(p50)
            p99s.append(p99)
            prog = bb["branch_balance"].progress()
            print(
                f"  run {run + 1}: p50 {p50:.2f}s p99 {p99:.2f}s over {n} commits "
                f"(epochs so far: {prog['barriers']}, last {prog['last_epoch_s']:.3f}s)"
            )
        print(
            f"freshness median of {args.runs}: p50 {statistics.median(p50s):.2f}s "
            f"p99 {statistics.median(p99s):.2f}s (target p50 <= 1.5s)"
        )
        bb["branch_balance"].stop()
        if args.skip_epochs:
            c.close()
            return 0

        sizes = [int(s) for s in args.sizes.split(",") if s]
        base = None
        print("full-recompute epoch time, 1,000 changed rows per barrier:")
        for size in sizes:
            t = epoch_times(spark, c, srv.address, size, args.barriers)
            base = base or t
            print(f"  source {size:>9,} rows: epoch {t:.3f}s ({t / base:.1f}x the smallest)")
        c.close()
    finally:
        spark.stop()
        srv.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
