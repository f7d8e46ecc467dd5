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

With ``--revise`` (``run_bank_demo(revise=True)``) a revision flows through the views while the
transfers and the checker keep going: a third of the way in, the demo notes the last good
barrier, loads a buggy batch that moves money into account 0 (branch 0 jumps), rolls
``accounts`` back to that barrier with ``Client.revise`` and follows the revision to every view
(``RevisionScenario``).

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

    from coordinator.revisions import Revision
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


def _one_line_at_a_time(out: Callable[[str], object]) -> Callable[[str], object]:
    """``out`` behind a lock: lines printed from two threads never interleave mid-line."""
    lock = threading.Lock()

    def locked(line: str) -> object:
        with lock:
            return out(line)

    return locked


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


BAD_TRANSFERS = 100  # the buggy batch: this many transfers into account 0 ...
# ... in this many transactions: small ones, as a transaction reading 10 accounts one by one
# while transfers run rarely conflicts, and one reading 100 nearly always would (small banks)
BAD_TRANSACTIONS = 10
BAD_ATTEMPTS = 100  # tries of one transaction before the batch job gives up


def bad_batch(
    client: coordinator.Client, rng: random.Random, accounts: int, table: str = "accounts"
) -> tuple[int, int]:
    """The buggy batch job: up to BAD_TRANSFERS transfers, each of half an account's balance
    from a distinct random account into account 0, in BAD_TRANSACTIONS transactions, each
    retried on conflict (RuntimeError after BAD_ATTEMPTS tries). The total is conserved (the
    invariant holds); only where the money is is wrong. Returns (transfers, commit ts of the
    last transaction)."""
    sources = rng.sample(range(1, accounts), min(BAD_TRANSFERS, accounts - 1))
    per_txn = -(-len(sources) // BAD_TRANSACTIONS)
    last_ts = 0
    for lo in range(0, len(sources), per_txn):
        for _attempt in range(BAD_ATTEMPTS):
            try:
                with client.transaction() as t:
                    sink = t.get(table, {"id": 0})
                    assert sink is not None  # create_accounts made every account
                    gained = 0
                    for a in sources[lo : lo + per_txn]:
                        ra = t.get(table, {"id": a})
                        assert ra is not None
                        amount = ra["balance"] // 2
                        t.put(table, {**ra, "balance": ra["balance"] - amount})
                        gained += amount
                    t.put(table, {**sink, "balance": sink["balance"] + gained})
                assert t.commit_ts is not None  # set once the block commits
                last_ts = t.commit_ts
                break
            except coordinator.WriteConflict:
                continue  # a concurrent transfer touched one of the accounts: try again
        else:
            raise RuntimeError(f"the buggy batch conflicted {BAD_ATTEMPTS} times in a row")
    return len(sources), last_ts


def branch_total(snap: Snapshot, branch: int = 0) -> int:
    """``branch``'s total in ``branch_balance`` as the (consistent) snapshot shows it."""
    bb = snap.read("branch_balance").to_pydict()
    return next(t for b, t in zip(bb["branch"], bb["total"], strict=True) if b == branch)


def consistent_at_least(client: coordinator.Client, ts: int, timeout_s: float = 60.0) -> Snapshot:
    """A consistent read of the four tables at a barrier covering ``ts`` (at or above it), the
    first the views reach; raises TimeoutError after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        snap = client.snapshot(list(TABLES), wait_s=timeout_s)
        if snap.barrier >= ts:
            return snap
        if time.monotonic() >= deadline:
            raise TimeoutError(f"no barrier at or above {ts} in all of {TABLES} yet")
        time.sleep(0.1)  # the views finish a barrier every trigger interval


def revision_progress_line(rev: Revision, views: dict[str, tuple[int, str]]) -> str:
    """``  revision N: barrier X: view ✓ view …``: which views have the revision's barrier."""
    if not rev.barrier:
        return f"  revision {rev.id}: {rev.state}, waiting for its barrier"
    marks = " ".join(
        f"{v} {'✓' if b >= rev.barrier else '…'}" for v, (b, _state) in sorted(views.items())
    )
    return f"  revision {rev.id}: barrier {rev.barrier}: {marks}"


class RevisionScenario:
    """``--revise``: a revision flowing through the views, run in a thread beside the checker.

    After ``at_s``: note the last good barrier B, load the buggy batch, show branch 0 jump in a
    consistent read, revise ``accounts`` back to B, print the views reaching the revision's
    barrier X as they do, then show branch 0 at X and the audit record. ``ok`` is True once
    every view has X and the read at X held the invariant; ``error`` says what went wrong."""

    def __init__(
        self,
        address: str,
        accounts: int,
        expected_total: int,
        at_s: float,
        out: Callable[[str], object],
    ) -> None:
        self.address, self.accounts, self.expected_total = address, accounts, expected_total
        self.at_s, self.out = at_s, out
        self.ok = False
        self.error = ""
        self._cancel = threading.Event()
        self._thread = threading.Thread(target=self._main, daemon=True, name="revision-demo")

    def start(self) -> RevisionScenario:
        self._thread.start()
        return self

    def running(self) -> bool:
        return self._thread.is_alive()

    def cancel(self) -> None:
        """Stop waiting to begin (a revision under way finishes its current step)."""
        self._cancel.set()
        self._thread.join(5)

    def _main(self) -> None:
        if self._cancel.wait(self.at_s):
            return
        try:
            with coordinator.connect(self.address) as c:
                self._run(c)
        except Exception as e:  # noqa: BLE001 - the demo reports it and exits 1
            self.error = f"{type(e).__name__}: {e}"
            self.out(f"revision demo failed: {self.error}")

    def _run(self, c: coordinator.Client) -> None:
        good = c.snapshot(list(TABLES), wait_s=60)
        b, at_b = good.barrier, branch_total(good)
        self.out(f"revise: the last good barrier is {with_wall(b)}; branch 0 total there: {at_b}")

        n, bad_ts = bad_batch(c, random.Random(16), self.accounts)
        self.out(
            f"revise: a buggy batch job moved money from {n} accounts into account 0 in "
            f"{BAD_TRANSACTIONS} transactions (last committed at {with_wall(bad_ts)})"
        )
        after = consistent_at_least(c, bad_ts)
        self.out(
            f"revise: branch 0 total {at_b} at barrier {b} -> {branch_total(after)} at barrier "
            f"{after.barrier} (consistent reads; the total is conserved, so the invariant holds)"
        )

        rev = c.revise("accounts", to_barrier=b, who="demo")
        self.out(f"revise: {rev}")
        self.out(f"  downstream views: {', '.join(rev.views)}")
        shown = [""]

        def progress(r: Revision, views: dict[str, tuple[int, str]]) -> None:
            line = revision_progress_line(r, views)
            if line != shown[0]:  # print changes only, not every poll
                shown[0] = line
                self.out(line)

        x = c.wait_revised(rev, timeout_s=120, progress=progress)
        self.out(
            f"revised: the whole topology shows the revision at barrier {with_wall(x)} "
            f"({', '.join(TABLES)})"
        )
        at_x = c.snapshot(list(TABLES), barrier=x, wait_s=60)
        bad = check({t: at_x.read(t) for t in TABLES}, self.expected_total, self.accounts)
        self.out(
            f"revised: branch 0 total at barrier {x}: {branch_total(at_x)} (was {at_b} at the "
            f"last good barrier {b}, {branch_total(after)} after the buggy batch; transfers "
            f"since the revision continue); invariant at {x}: "
            f"{'holds' if not bad else 'BROKEN: ' + bad[0]}"
        )
        audit = c.revisions("accounts")[0]
        self.out(
            f"revised: audit record: {audit}; by {audit.who}, target barrier "
            f"{audit.target_barrier}, visible at barrier {audit.barrier}"
        )
        self.ok = not bad


def run_bank_demo(
    duration_s: float = 30.0,
    accounts: int = 1000,
    writers: int = 3,
    barrier_interval: str = "1s",
    rate: float = 100.0,
    out: Callable[[str], object] = print,
    revise: bool = False,
) -> int:
    """Run the demo; returns 0 if every consistent read in snapshot mode held the invariant
    (and, with ``revise``, the revision reached every view: ``RevisionScenario``)."""
    from snapview.embedded import EmbeddedServer

    out = _one_line_at_a_time(out)  # the revision thread prints beside the live lines
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
    scenario: RevisionScenario | None = None
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
        if revise:
            out(f"with --revise: a revision of accounts after {duration_s / 3:.0f}s")
            scenario = RevisionScenario(srv.address, accounts, expected, duration_s / 3, out)
            scenario.start()
        start = time.monotonic()
        next_print = start + 1.0
        behind, warned_at = 0, -1e9
        # With --revise, keep reading until the revision has reached every view (or failed):
        # the point is that the checker reads consistently all the way through it.
        while time.monotonic() - start < duration_s or (scenario and scenario.running()):
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
        if scenario is not None and not scenario.ok:
            ok = False
            out(f"revision: did not reach every view ({scenario.error or 'see above'})")
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
        if scenario is not None:
            scenario.cancel()
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
