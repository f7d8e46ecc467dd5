"""The bank demo's topology (accounts -> branch_balance, total_balance -> total_from_branches)
with real view jobs on Spark, built once for the module:

- consistency under transfers: every consistent read holds the bank invariant, mode latest does
  not (so the check can fail), and every committed version of every view equals its query;

Revisions through it:

- a batch of bad transfers rolled back to the barrier before it while transfers keep running and
  a reader keeps reading: the table is restored at the revision's commit, every view reaches the
  revision at one barrier, and every consistent read holds the bank invariant;
- the dry run's preview of the views equals what their next epoch then changes;
- a correction set from a Spark DataFrame (and its dry run, which writes nothing);
- a rebuild of a view whose contents went wrong, with its downstream view following at the
  same barrier.
"""

from __future__ import annotations

import random
import re
import threading
import time

import pytest

import coordinator
from coordinator.jobs import EpochState
from snapview.cli import main as cli_main
from snapview.demos.bank import (
    TABLES,
    VIEWS,
    Checker,
    build_views,
    check,
    create_accounts,
    start_transfers,
    stop_transfers,
    transfer,
)
from snapview.revision_preview import count_changes, preview_views
from tests.conftest import connected, server_fixture, wait_for
from tests.spark.test_views import issued_barriers

ACCOUNTS = BANK_ACCOUNTS = 200


bank_server = server_fixture("bank", "--barrier-interval", "500ms")


@pytest.fixture(scope="module")
def bank(spark, bank_server):
    """A server at 500 ms barriers, the accounts and the three views, running for the module
    (building three view jobs costs ~25 s: once). Yields (server, client, views by name). Tests
    that change the accounts' total (corrections) read the total they check against."""
    for c in connected(bank_server):
        create_accounts(c, ACCOUNTS)
        jobs = build_views(spark, bank_server.address)
        try:
            ts = c.tso()
            for j in jobs.values():
                j.await_barrier(ts, timeout=180)
            yield bank_server, c, jobs
        finally:
            for j in jobs.values():
                j.stop()


def _consistent(c, tables=TABLES, after: int = 0):
    """A snapshot of ``tables`` at a barrier above ``after`` (waiting for the views)."""
    return wait_for(
        lambda: (s := c.snapshot(list(tables), wait_s=30)).barrier > after and s,
        120,
        f"a common barrier above {after}",
    )


def _bad_batch(c) -> tuple[int, int]:
    """Move 20 from each of 54 accounts outside branch 0 into account 0, in one transaction
    (retried on a conflict with the running transfers); (amount moved, commit ts)."""
    while True:
        try:
            with c.transaction() as t:
                moved = 0
                for i in range(1, 60):
                    if i % 10 == 0:
                        continue
                    row = t.get("accounts", {"id": i})
                    t.put("accounts", {**row, "balance": row["balance"] - 20})
                    moved += 20
                a0 = t.get("accounts", {"id": 0})
                t.put("accounts", {**a0, "balance": a0["balance"] + moved})
            return moved, t.commit_ts
        except coordinator.WriteConflict:
            continue


def _total(c) -> int:
    """The accounts' total now (the shared bank's other tests may have corrected balances)."""
    return sum(r["balance"] for r in c.read("accounts").to_pylist())


def _balances(c, at: int) -> dict[int, int]:
    return {r["id"]: r["balance"] for r in c.read("accounts", at=at).to_pylist()}


def test_bank_views_are_consistent_in_snapshot_mode_only(bank):
    """Three views (one over another) under transfers from two processes: >= 300 consistent
    reads with 0 violations (the revision tests below read them under transfers and a revision
    too); mode latest shows violations, so the check can fail; and every committed version of
    every view equals its query over the sources at its barrier."""
    bank_server, vc, jobs = bank
    accounts = ACCOUNTS
    expected = sum(r["balance"] for r in vc.read("accounts").to_pylist())
    stop = None
    try:
        stop, done, procs = start_transfers(bank_server.address, accounts, 2, rate=150)
        checker = Checker(vc, expected, accounts)
        barriers = set()
        deadline = time.monotonic() + 240
        while checker.reads["snapshot"] < 300 or checker.reads["latest"] < 30:
            assert time.monotonic() < deadline, f"too slow: {checker.reads}"
            snap, _ = checker.read_once("snapshot")
            barriers.add(snap.barrier)
            if checker.reads["snapshot"] % 5 == 0:
                checker.read_once("latest")
        stop_transfers(stop, procs)
        stop = None
        assert done.value > 100
        assert checker.violations["snapshot"] == 0, checker.examples
        assert checker.violations["latest"] > 0  # the check does catch a mixed read
        assert len(barriers) >= 5  # the views moved on while we read

        # every version of every view, barrier by barrier, from the first consistent one
        last = vc.tso()
        for j in jobs.values():
            j.await_barrier(last, timeout=120)
        first = min(barriers)
        newest = vc.snapshot(list(TABLES), wait_s=60).barrier
        checked = 0
        for b in issued_barriers(vc, "total_from_branches", first, newest):
            snap = vc.snapshot(list(TABLES), barrier=b)
            assert check({t: snap.read(t) for t in TABLES}, expected, accounts) == [], b
            for view in TABLES[1:]:
                e = vc.jobs.get_epoch(view, b)
                assert e.state is EpochState.COMMITTED and e.commit_ts == snap.read_ts(view)
            checked += 1
        assert checked >= len(barriers)
    finally:
        if stop is not None:
            stop_transfers(stop, procs)


def test_bad_transfers_rolled_back_through_every_view(bank):
    srv, c, jobs = bank
    expected = _total(c)
    stop = threading.Event()
    reads: list[tuple[int, list[str]]] = []
    transfers = [0]

    def transfers_loop() -> None:
        rng = random.Random(1)
        with coordinator.connect(srv.address) as w:
            while not stop.wait(0.05):  # about 20 a second
                transfers[0] += transfer(w, rng, ACCOUNTS) is not None

    def reader_loop() -> None:
        with coordinator.connect(srv.address) as r:
            checker = Checker(r, expected, ACCOUNTS)
            while not stop.is_set():
                snap, bad = checker.read_once("snapshot")
                reads.append((snap.barrier, bad))

    threads = [threading.Thread(target=f, daemon=True) for f in (transfers_loop, reader_loop)]
    for t in threads:
        t.start()
    try:
        wait_for(lambda: transfers[0] >= 20, 30, "some transfers")
        good = _consistent(c)
        # The bad batch: money from other branches' accounts into account 0 (branch 0). A
        # transfer touches account 0 about once in a hundred, so its own drift stays far below
        # what the batch moves.
        moved, bad_ts = _bad_batch(c)
        bad = _consistent(c, after=bad_ts)
        good0 = _balances(c, good.read_ts("accounts"))[0]
        assert _balances(c, bad.read_ts("accounts"))[0] > good0 + moved // 2
        # ... and the views show it, consistently (branch 0's total is computed from it).
        assert check({x: bad.read(x) for x in TABLES}, expected, ACCOUNTS) == []

        rev = c.revise("accounts", to_barrier=good.barrier, who="test")
        assert (
            rev.done
            and rev.rows > 0
            and rev.views
            == (
                "branch_balance",
                "total_balance",
                "total_from_branches",
            )
        )
        barrier = c.wait_revised(rev, timeout_s=120)
        wait_for(lambda: any(b >= barrier for b, _ in reads), 60, "a read at the revision")
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    # Restored: at the revision's commit the table is exactly as at the good barrier.
    assert _balances(c, rev.commit_ts) == _balances(c, good.read_ts("accounts"))
    assert _balances(c, rev.commit_ts - 1) != _balances(c, good.read_ts("accounts"))
    # At the revision's barrier every table and view shows the restored state, consistently.
    at = c.snapshot(list(TABLES), barrier=barrier)
    assert check({t: at.read(t) for t in TABLES}, expected, ACCOUNTS) == []
    assert at.read_ts("accounts") == barrier > rev.commit_ts
    assert _balances(c, barrier)[0] < good0 + moved // 2  # account 0's windfall is gone
    # Every consistent read, during the revision too, held the invariant.
    assert len(reads) >= 5 and [b for b, bad in reads if bad] == []
    assert min(b for b, _ in reads) < rev.commit_ts < max(b for b, _ in reads)
    assert c.revisions("accounts")[0].id == rev.id


def test_dry_run_preview_equals_the_next_epochs_change(bank, spark, capsys):
    srv, c, jobs = bank
    before = _consistent(c, after=c.tso())  # after everything the last test wrote
    with c.transaction() as t:
        for i in (3, 13, 23):  # branch 3 only: one row of branch_balance changes
            row = t.get("accounts", {"id": i})
            t.put("accounts", {**row, "balance": row["balance"] + 1})
    after = _consistent(c, after=t.commit_ts)
    views = list(VIEWS)
    dry = c.revise("accounts", to_barrier=before.barrier, dry_run=True)
    assert (dry.state, dry.restored, dry.removed) == ("dry_run", 3, 0)
    assert _consistent(c).read("accounts").to_pylist() == after.read("accounts").to_pylist()
    at, preview = preview_views(spark, c, "accounts", list(dry.views), target_ts=dry.target_ts)
    got = {v.view: (v.inserted, v.deleted, v.updated) for v in preview}
    # branch 3's row of branch_balance, and the one row of each total
    assert got == {
        "branch_balance": (0, 0, 1),
        "total_balance": (0, 0, 1),
        "total_from_branches": (0, 0, 1),
    }, got
    assert views == list(dry.views)
    # The same through the command line (in this process: it keeps the running session).
    assert (
        cli_main(
            [
                "revise",
                "accounts",
                "--to-barrier",
                str(before.barrier),
                "--dry-run",
                "--address",
                srv.address,
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "accounts would change 3 rows (3 restored, 0 removed); nothing written" in out
    for v in views:
        assert re.search(rf"^  {v} +1 rows \(0 inserted, 0 deleted, 1 updated\)$", out, re.M), out
    rev = c.revise("accounts", to_barrier=before.barrier)
    barrier = c.wait_revised(rev, 120)
    then = c.snapshot(list(TABLES), barrier=at)
    now = c.snapshot(list(TABLES), barrier=barrier)
    for v in views:
        key = ["branch"] if v == "branch_balance" else []
        old = spark.createDataFrame(then.read(v).to_pandas())
        new = spark.createDataFrame(now.read(v).to_pandas())
        assert count_changes(old, new, key) == got[v], v


def test_corrections_from_a_dataframe_and_its_dry_run(bank, spark):
    srv, c, jobs = bank
    base = _consistent(c, after=c.tso())
    rows = [{"id": i, "branch": i % 10, "balance": 7} for i in range(100, 140)]
    df = spark.createDataFrame(rows, "id BIGINT, branch INT, balance BIGINT").repartition(3)
    dry = c.revise("accounts", corrections=df, dry_run=True)
    assert (dry.state, dry.restored) == ("dry_run", 40)
    assert _consistent(c).read("accounts").to_pylist() == base.read("accounts").to_pylist()
    rev = c.revise("accounts", corrections=df, who="fixer")
    assert rev.done and rev.kind == "corrections" and rev.restored == 40 and rev.job
    got = _balances(c, rev.commit_ts)
    assert all(got[i] == 7 for i in range(100, 140))
    assert _balances(c, rev.commit_ts - 1) == _balances(c, base.read_ts("accounts"))
    barrier = c.wait_revised(rev, 120)
    at = c.snapshot(list(TABLES), barrier=barrier)
    total = sum(r["balance"] for r in at.read("accounts").to_pylist())
    assert check({t: at.read(t) for t in TABLES}, total, ACCOUNTS) == []
    # Deleting through a DataFrame of keys.
    gone = c.revise("accounts", corrections=df.select("id").limit(5), mode="delete")
    assert gone.removed == 5 and c.read("accounts").num_rows == ACCOUNTS - 5
    c.revise("accounts", corrections=df.limit(5), mode="upsert")  # back, for the next test


def test_rebuild_repairs_a_view_and_its_downstream_follows(bank):
    srv, c, jobs = bank
    base = _consistent(c, after=c.tso())
    # A view gone wrong (as a bug would leave it): a plain transaction writes into it.
    with c.transaction() as t:
        t.put("branch_balance", {"branch": 99, "total": 12345, "accounts": 1})
    wrong = _consistent(c, after=t.commit_ts)
    assert any(r["branch"] == 99 for r in wrong.read("branch_balance").to_pylist())
    n = wrong.read("accounts").num_rows
    total = sum(r["balance"] for r in wrong.read("accounts").to_pylist())
    assert check({x: wrong.read(x) for x in TABLES}, total, n) != []  # the views disagree
    rev = c.rebuild("branch_balance", who="ops")
    assert rev.kind == "rebuild" and rev.views == ("total_from_branches",)
    barrier = c.wait_revised(rev, 120)
    done = c.revision(rev.id)
    assert done.state == "done" and done.barrier == barrier and done.restored >= 1
    at = c.snapshot(list(TABLES), barrier=barrier)
    total = sum(r["balance"] for r in at.read("accounts").to_pylist())
    assert check({t: at.read(t) for t in TABLES}, total, at.read("accounts").num_rows) == []
    epoch = c.jobs.get_epoch(jobs["branch_balance"].view.job, barrier)
    assert f'"rebuild": {rev.id}' in epoch.metadata
    assert "rebuild was requested" in epoch.metadata
    assert base.barrier < barrier


def test_rebuild_of_a_full_recompute_view(bank, spark):
    """A full-recompute view recomputes only when a source changed; a rebuild makes it
    recompute at its next barrier anyway, and so repairs it."""
    from spark_sink import MaterializedView

    srv, c, jobs = bank
    job = (
        MaterializedView.builder(spark)
        .coordinator(srv.address)
        .query("SELECT branch, MAX(balance) AS top FROM accounts GROUP BY branch")
        .target("branch_top")
        .primary_key(["branch"])
        .strategy("full_recompute")
        .trigger_interval("200 milliseconds")
        .build()
        .start()
    )
    try:
        job.await_barrier(c.tso(), timeout=120)
        with c.transaction() as t:
            t.put("branch_top", {"branch": 99, "top": -1})
        wrong = _consistent(c, ["accounts", "branch_top"], after=t.commit_ts)
        assert any(r["branch"] == 99 for r in wrong.read("branch_top").to_pylist())
        rev = c.rebuild("branch_top")
        barrier = c.wait_revised(rev, 120)
        at = c.snapshot(["accounts", "branch_top"], barrier=barrier)
        top: dict[int, int] = {}
        for r in at.read("accounts").to_pylist():
            top[r["branch"]] = max(top.get(r["branch"], r["balance"]), r["balance"])
        assert {r["branch"]: r["top"] for r in at.read("branch_top").to_pylist()} == top
        meta = c.jobs.get_epoch(job.view.job, barrier).metadata
        assert f'"rebuild": {rev.id}' in meta and '"recomputed": true' in meta
    finally:
        job.stop()
