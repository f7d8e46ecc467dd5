"""The bank: accounts, concurrent transfers, three views, and the invariant that proves them.

``snapview demo bank`` (and ``make demo``) runs it on the embedded default:

- 1,000 accounts in 10 branches, 1,000 each;
- transfer processes moving money between random accounts, 100 a second in all by default (the
  total never changes);
- three MaterializedViews: ``branch_balance`` (GROUP BY branch), ``total_balance`` (a global SUM
  and COUNT) and ``total_from_branches`` (a view over ``branch_balance``);
- a checker reading all four tables together, alternately in mode ``snapshot`` and ``latest``,
  printing one line per second. In ``snapshot`` mode violations are always 0; in ``latest`` mode
  (each table at its own newest version, as ordinary streaming shows) they are not.

The tests and ``scripts/bench_freshness.py`` reuse these pieces.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import random
import shutil
import statistics
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import coordinator
from coordinator.times import with_wall
from snapview.local_spark import local_session

if TYPE_CHECKING:
    from multiprocessing.context import SpawnProcess
    from multiprocessing.sharedctypes import Synchronized
    from multiprocessing.synchronize import Event

    import pyarrow as pa
    from pyspark.sql import SparkSession

    from coordinator.snapshot import Snapshot
    from spark_sink import ViewJob

BRANCHES = 10
START_BALANCE = 1000
TABLES = ("accounts", "branch_balance", "total_balance", "total_from_branches")
VIEWS = {
    "branch_balance": (
        "SELECT branch, SUM(balance) AS total, COUNT(*) AS accounts FROM accounts GROUP BY branch",
        ["branch"],
    ),
    "total_balance": ("SELECT SUM(balance) AS total, COUNT(*) AS accounts FROM accounts", None),
    "total_from_branches": ("SELECT SUM(total) AS total FROM branch_balance", None),
}


def create_accounts(client: coordinator.Client, accounts: int, table: str = "accounts") -> int:
    """Create ``table`` with ``accounts`` accounts of START_BALANCE; returns the total."""
    client.create_table(table, "id BIGINT, branch INT, balance BIGINT", primary_key=["id"])
    for lo in range(0, accounts, 2000):
        with client.transaction() as t:
            for i in range(lo, min(accounts, lo + 2000)):
                t.put(table, {"id": i, "branch": i % BRANCHES, "balance": START_BALANCE})
    return accounts * START_BALANCE


def transfer(
    client: coordinator.Client, rng: random.Random, accounts: int, table: str = "accounts"
) -> int | None:
    """One transfer between two random accounts; its commit ts, or None if it did not commit
    (a conflict or too little money)."""
    a, b = rng.sample(range(accounts), 2)
    amount = rng.randint(1, 50)
    try:
        with client.transaction() as t:
            ra = t.get(table, {"id": a})
            rb = t.get(table, {"id": b})
            assert ra is not None and rb is not None  # create_accounts made every account
            if ra["balance"] < amount:
                return None
            t.put(table, {**ra, "balance": ra["balance"] - amount})
            t.put(table, {**rb, "balance": rb["balance"] + amount})
        return t.commit_ts
    except coordinator.WriteConflict:
        return None


def transfer_worker(
    address: str,
    accounts: int,
    seed: int,
    stop: Event,
    done: Synchronized[int],
    rate: float = 0,
) -> None:
    """Transfer until ``stop`` is set (at most ``rate`` per second if given)."""
    rng = random.Random(seed)
    c = coordinator.connect(address)
    next_at = time.monotonic()
    while not stop.is_set():
        if rate:
            next_at += 1.0 / rate
            delay = next_at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        if transfer(c, rng, accounts) is not None:
            with done.get_lock():
                done.value += 1
    c.close()


def start_transfers(
    address: str, accounts: int, writers: int, rate: float = 0
) -> tuple[Event, Synchronized[int], list[SpawnProcess]]:
    """``writers`` transfer processes; returns (stop event, done counter, processes)."""
    ctx = mp.get_context("spawn")
    stop, done = ctx.Event(), ctx.Value("q", 0)
    procs = [
        ctx.Process(
            target=transfer_worker,
            args=(address, accounts, seed, stop, done, rate / writers if rate else 0),
            daemon=True,
        )
        for seed in range(writers)
    ]
    for p in procs:
        p.start()
    return stop, done, procs


def stop_transfers(stop: Event, procs: list[SpawnProcess]) -> None:
    stop.set()
    for p in procs:
        p.join(30)
        if p.is_alive():
            p.kill()


def build_views(
    spark: SparkSession,
    address: str,
    trigger_interval: str = "200 milliseconds",
    only: Collection[str] | None = None,
) -> dict[str, ViewJob]:
    """Build and start the bank views (all three, or those in ``only``); {name: ViewJob}."""
    from spark_sink import MaterializedView

    jobs = {}
    for name, (sql, pk) in VIEWS.items():
        if only is not None and name not in only:
            continue
        b = MaterializedView.builder(spark).coordinator(address).query(sql).target(name)
        if pk:
            b = b.primary_key(pk)
        jobs[name] = b.trigger_interval(trigger_interval).build().start()
    return jobs


def check(tables: dict[str, pa.Table], expected_total: int, accounts: int) -> list[str]:
    """Violations of the bank invariant in one read of the four tables (pyarrow Tables):
    the source total, each view against the query over the accounts read with it, and the
    cascade against the view it reads."""
    out = []
    acc = tables["accounts"].to_pydict()
    total = sum(acc["balance"])
    if total != expected_total or len(acc["id"]) != accounts:
        out.append(f"accounts total {total} over {len(acc['id'])} rows")
    by_branch: defaultdict[int, list[int]] = defaultdict(lambda: [0, 0])
    for br, bal in zip(acc["branch"], acc["balance"], strict=True):
        by_branch[br][0] += bal
        by_branch[br][1] += 1
    bb = tables["branch_balance"].to_pydict()
    got = {b: [t, n] for b, t, n in zip(bb["branch"], bb["total"], bb["accounts"], strict=True)}
    if got != dict(by_branch):
        out.append("branch_balance differs from SUM(balance) GROUP BY branch over accounts")
    tb = tables["total_balance"].to_pylist()
    if tb != [{"total": total, "accounts": len(acc["id"])}]:
        out.append(f"total_balance {tb} != SUM/COUNT over accounts ({total})")
    tfb = tables["total_from_branches"].to_pylist()
    if tfb != [{"total": sum(bb["total"])}]:
        out.append(f"total_from_branches {tfb} != SUM(total) over branch_balance")
    return out


@dataclass
class Checker:
    """Consistent reads of the four tables, counting violations per mode."""

    client: coordinator.Client
    expected_total: int
    accounts: int
    reads: dict = field(default_factory=lambda: {"snapshot": 0, "latest": 0})
    violations: dict = field(default_factory=lambda: {"snapshot": 0, "latest": 0})
    examples: list = field(default_factory=list)
    last_barrier: int = 0
    freshness_ms: int = 0
    freshness_samples: list = field(default_factory=list)

    def read_once(self, mode: str) -> tuple[Snapshot, list[str]]:
        # Right after the views start, their first barriers may not overlap yet: wait for one.
        snap = self.client.snapshot(list(TABLES), mode=mode, wait_s=60 if mode == "snapshot" else 0)
        tables = {t: snap.read(t) for t in TABLES}
        bad = check(tables, self.expected_total, self.accounts)
        self.reads[mode] += 1
        if bad:
            self.violations[mode] += 1
            if len(self.examples) < 5:
                # latest mode has no barrier: it reads every table at one fresh timestamp
                at = snap.barrier if mode == "snapshot" else snap.read_ts(TABLES[0])
                self.examples.append((mode, at, bad))
        if mode == "snapshot":
            self.last_barrier = snap.barrier
            self.freshness_ms = int(time.time() * 1000) - snap.barrier_wall_ms
            self.freshness_samples.append(self.freshness_ms)
        return snap, bad


@contextlib.contextmanager
def _ticking(out: Callable[[str], object], what: str, every_s: float = 10.0) -> Iterator[None]:
    """Print ``what...`` now, ``  ...Ns so far`` every ``every_s`` while the block runs, and
    ``  done in Ns`` after it, so a slow start is never silent."""
    out(f"{what}...")
    start = time.monotonic()
    stop = threading.Event()

    def tick() -> None:
        while not stop.wait(every_s):
            out(f"  ...{time.monotonic() - start:.0f}s so far")

    t = threading.Thread(target=tick, daemon=True)
    t.start()
    try:
        yield
    finally:
        stop.set()
        t.join()
    out(f"  done in {time.monotonic() - start:.1f}s")


def views_behind(client: coordinator.Client) -> int:
    """How many barriers the furthest-behind bank view is behind the newest barrier."""
    d = client.delay()
    return max((t.barriers_behind for t in d.tables if t.table in VIEWS), default=0)


BEHIND_WARNING = 3  # barriers: below this a view is just finishing the one in progress


def summary_lines(
    checker: Checker, transfers: int, seconds: float, behind: int, barrier_interval: str
) -> list[str]:
    """The end of the demo, to read in five seconds."""
    snap_n, snap_bad = checker.reads["snapshot"], checker.violations["snapshot"]
    lat_n, lat_bad = checker.reads["latest"], checker.violations["latest"]
    fresh = checker.freshness_samples or [0]
    verdict = "every read saw one state" if snap_bad == 0 else "INVARIANT BROKEN"
    pct = f" ({100 * lat_bad / lat_n:.0f}%)" if lat_n else ""
    lag = (
        f"views {behind} barriers behind at the end (barriers every {barrier_interval})"
        if behind >= BEHIND_WARNING
        else "views kept up with the barriers"
    )
    return [
        f"summary after {seconds:.0f}s, {transfers} transfers:",
        f"  snapshot mode: {snap_n} consistent reads, {snap_bad} violations: {verdict}",
        f"  latest mode:   {lat_n} reads, {lat_bad} saw tables at different states{pct}",
        f"  freshness:     median {statistics.median(fresh) / 1000:.1f}s, "
        f"at the end {fresh[-1] / 1000:.1f}s; {lag}",
    ]


def run_bank_demo(
    duration_s: float = 30.0,
    accounts: int = 1000,
    writers: int = 3,
    barrier_interval: str = "1s",
    rate: float = 100.0,
    out: Callable[[str], object] = print,
) -> int:
    """Run the demo; returns 0 if every consistent read in snapshot mode held the invariant."""
    from snapview.embedded import EmbeddedServer

    data_dir = tempfile.mkdtemp(prefix="snapview-demo-")
    srv = EmbeddedServer(
        data_dir, extra_args=["--barrier-interval", barrier_interval], metrics_port=0
    ).start()
    out(f"snapview serve on {srv.address} (data dir {data_dir}, barriers every {barrier_interval})")
    out(f"metrics: {srv.metrics_address} (Prometheus; every metric: docs/metrics.md)")
    stop: Event | None = None
    procs: list[SpawnProcess] = []
    spark: SparkSession | None = None
    jobs: dict[str, ViewJob] = {}
    try:
        c = coordinator.connect(srv.address)
        expected = create_accounts(c, accounts)
        out(f"created {accounts} accounts in {BRANCHES} branches, total {expected}")

        with _ticking(out, "Starting Spark (local mode; the JVM takes a while)"):
            spark = local_session(app_name="snapview-demo-bank")
        with _ticking(out, f"Building the {len(VIEWS)} views (analyzing their queries)"):
            jobs = build_views(spark, srv.address)
        for j in jobs.values():
            out(j.view.explain())
        ts = c.tso()
        with _ticking(out, "Waiting for the views' first barrier (their build)"):
            for j in jobs.values():
                j.await_barrier(ts, timeout=120)
        out(
            f"views built; {writers} transfer processes ({rate:g} transfers/s in all) for "
            f"{duration_s:g}s"
        )
        stop, done, procs = start_transfers(srv.address, accounts, writers, rate)
        checker = Checker(c, expected, accounts)
        start = time.monotonic()
        next_print = start + 1.0
        behind, warned_at = 0, -1e9
        while time.monotonic() - start < duration_s:
            t0 = time.monotonic()
            checker.read_once("snapshot")
            checker.read_once("latest")
            time.sleep(max(0.0, 0.1 - (time.monotonic() - t0)))  # about 10 checks a second
            if time.monotonic() >= next_print:
                next_print += 1.0
                out(
                    f"t={time.monotonic() - start:4.1f}s barrier={checker.last_barrier} "
                    f"freshness={checker.freshness_ms}ms transfers={done.value} "
                    f"consistent_reads={checker.reads['snapshot']} "
                    f"violations snapshot={checker.violations['snapshot']} "
                    f"latest={checker.violations['latest']}/{checker.reads['latest']}"
                )
                behind = views_behind(c)
                if behind >= BEHIND_WARNING and time.monotonic() - warned_at >= 5:
                    warned_at = time.monotonic()
                    out(
                        f"  views are behind by {behind} barriers: Spark recomputes them slower "
                        f"than barriers arrive (every {barrier_interval}), so freshness grows"
                    )
        elapsed = time.monotonic() - start
        stop_transfers(stop, procs)
        for mode, at, bad in checker.examples[:2]:
            if mode == "snapshot":
                out(f"example snapshot-mode violation at barrier {with_wall(at)}: {bad[0]}")
            else:
                out(f"example latest-mode read (all tables at ts {with_wall(at)}): {bad[0]}")
        ok = checker.violations["snapshot"] == 0
        for line in summary_lines(checker, done.value, elapsed, behind, barrier_interval):
            out(line)
        out(
            f"done: {done.value} transfers, {checker.reads['snapshot']} consistent reads with "
            f"{checker.violations['snapshot']} violations in snapshot mode; latest mode: "
            f"{checker.violations['latest']} of {checker.reads['latest']} reads violated"
        )
        c.close()
        return 0 if ok else 1
    finally:
        if stop is not None:
            stop_transfers(stop, procs)
        for j in jobs.values():
            try:
                j.stop()
            except Exception:  # noqa: BLE001 - best effort at shutdown
                pass
        if spark is not None:
            spark.stop()
        srv.stop()
        shutil.rmtree(data_dir, ignore_errors=True)
