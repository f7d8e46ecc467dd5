"""GC in bounded steps, on a real LMDB store: for seeded random histories (puts, deletes,
rollbacks, values long enough for the data CF, live locks), collecting at a safepoint in steps of
any size leaves every read and change scan at or above the safepoint as it was, refuses those
below it, and actually removes history. The checker (``observe``) gets a self-test that plants
the fault it must catch."""

from __future__ import annotations

import random

import pytest

from kvstore.actions.gc import GcCursor, plan_gc_step
from kvstore.errors import SnapshotTooOld
from kvstore.testing import Kv

KEYS = 12


def history(kv: Kv, clock, seed: int) -> list[int]:
    """A random history over KEYS keys; returns every commit ts, in order."""
    rnd = random.Random(seed)
    commits = []
    for _ in range(120):
        k = rnd.randrange(KEYS)
        start = clock()
        roll = rnd.random()
        if roll < 0.15:  # a delete
            kv.must_prewrite_delete(k, k, start)
            commit = clock()
            kv.must_commit(k, start, commit)
        elif roll < 0.22:  # a transaction rolled back: a Rollback record
            kv.must_prewrite_put(k, "r", k, start)
            kv.must_rollback(k, start)
            continue
        else:
            v = ("L" * 1500 if rnd.random() < 0.2 else "v") + str(start)  # some in the data CF
            kv.must_prewrite_put(k, v, k, start)
            commit = clock()
            kv.must_commit(k, start, commit)
        commits.append(commit)
    return commits


def observe(kv: Kv, points: list[int], now: int) -> dict:
    """Every key's value at each point, and the net changes from each point to ``now``."""
    out: dict = {}
    for p in points:
        out[("get", p)] = [kv.value_of(kv.store.get(kv.key(k), p)) for k in range(KEYS)]
        if p < now:
            changes = kv.store.scan_changes("kv", p, now)
            out[("changes", p)] = sorted((c.key, c.old, c.new) for c in changes)
    return out


def records(kv: Kv) -> int:
    with kv.store.storage.read_txn() as r:
        return sum(1 for _ in r.walk("write")) + sum(1 for _ in r.walk("changes"))


@pytest.mark.parametrize("seed,budget", [(1, 1), (2, 3), (3, 7), (4, 2048)])
def test_stepwise_gc_keeps_every_read_at_or_above_the_safepoint(store, clock, seed, budget):
    kv = Kv(store)
    commits = history(kv, clock, seed)
    safepoint = commits[len(commits) // 2]
    now = clock()
    kv.must_prewrite_put(0, "pending", 0, clock())  # a live lock (after now): GC leaves locks
    points = [safepoint, *commits[len(commits) // 2 + 1 :: 7], now]
    before = observe(kv, points, now)
    n_before = records(kv)

    store.advance_safepoint(safepoint)
    cursor, steps, removed = GcCursor(), 0, 0
    while not cursor.done:
        step = store.gc_step(cursor, budget)
        assert step.examined <= 4 * budget or budget >= 2048
        cursor, steps, removed = step.next, steps + 1, removed + step.versions
    assert removed > 0 and records(kv) < n_before
    if budget <= 3:
        assert steps > 10  # really in steps
    assert observe(kv, points, now) == before
    kv.must_locked(0, kv.lock(0).start_ts)
    # A second pass at the same safepoint finds at most the settling Deletes of keys a step
    # stopped inside (kept until a pass walks the key whole); a third finds nothing.
    store.gc(safepoint)
    assert observe(kv, points, now) == before
    assert store.gc(safepoint) == 0
    # Below the safepoint: refused, never answered from what is left.
    with pytest.raises(SnapshotTooOld, match="'kv'"):
        store.get(kv.key(1), safepoint - 1)
    with pytest.raises(SnapshotTooOld, match="change scan"):
        store.scan_changes("kv", safepoint - 1, now)
    with pytest.raises(SnapshotTooOld):
        list(store.scan(kv.info.prefix, b"", safepoint - 1))


def test_the_checker_catches_a_gc_that_removes_a_needed_version(store, clock):
    """Plant the fault GC must never make (drop the newest Put at or below the safepoint of a
    key that has newer versions too) and check that ``observe`` sees the difference."""
    kv = Kv(store)
    commits = history(kv, clock, 5)
    safepoint = commits[len(commits) // 2]
    now = clock()
    before = observe(kv, [safepoint, now], now)
    with store.storage.read_txn() as r:
        victim = None
        for k in range(KEYS):
            got = r.seek_write(kv.key(k), safepoint)
            if got is not None and got[1].kind.name == "PUT":
                victim = (kv.key(k), got[0])
                break
    assert victim is not None
    from kvstore.mvcc.keys import versioned_key

    store.run_write(lambda ctx: ctx.buf.delete("write", versioned_key(*victim)))
    assert observe(kv, [safepoint, now], now) != before


@pytest.mark.parametrize("incremental", [False, True], ids=["full", "incremental"])
def test_a_deleted_key_with_many_versions_reads_deleted_after_every_step(store, clock, incremental):
    """A key deleted at the safepoint with far more older versions than a step walks: a read at
    the safepoint says deleted after every step of the pass (the settling Delete goes last), and
    repeated passes leave nothing of the key at or below the safepoint."""
    kv = Kv(store)
    for i in range(60):
        kv.must_put(1, f"v{i}", clock(), clock())
    start = clock()
    kv.must_prewrite_delete(1, 1, start)
    kv.must_commit(1, start, clock())
    safepoint = clock()
    store.advance_safepoint(safepoint)
    for _ in range(4):
        cursor = GcCursor.incremental() if incremental else GcCursor()
        while not cursor.done:
            cursor = store.gc_step(cursor, 3).next
            assert store.get(kv.key(1), safepoint) is None
    with store.storage.read_txn() as r:
        assert not list(r.iter_writes(kv.key(1), safepoint))


def test_a_pass_resumes_inside_a_key_with_many_versions(store, clock):
    """One key with far more versions than a step examines: the pass stops inside it and
    resumes with what it knew (the newest Put at or below the safepoint stays)."""
    kv = Kv(store)
    for i in range(200):
        kv.must_put(1, f"v{i}", clock(), clock())
    safepoint = clock()
    kv.must_put(1, "after", clock(), clock())
    store.advance_safepoint(safepoint)
    cursor, steps = GcCursor(), 0
    while not cursor.done:
        step = store.gc_step(cursor, 5)
        cursor, steps = step.next, steps + 1
    assert steps > 5
    kv.must_get(1, safepoint, "v199")
    kv.must_get(1, clock(), "after")
    with store.storage.read_txn() as r:
        assert sum(1 for _ in r.iter_prefix("write", kv.key(1))) == 2


def _full_pass_plan(store, safepoint: int) -> list[tuple[str, bytes]]:
    """What a full pass at ``safepoint`` would delete now (planned, nothing deleted)."""
    doomed, cursor = [], GcCursor()
    while not cursor.done:
        with store.storage.read_txn() as r:
            step = plan_gc_step(r, safepoint, cursor, 4096)
        doomed += step.doomed
        cursor = step.next
    return doomed


@pytest.mark.parametrize("seed,budget", [(11, 1), (12, 3), (13, 64), (14, 2048)])
def test_an_incremental_pass_keeps_every_read_and_leaves_only_what_no_entry_names(
    store, clock, seed, budget
):
    """An incremental pass (the change index's entries at or below the safepoint, each key's
    history collected with its entry) keeps every read and change scan at or above the
    safepoint after every step, and, once a pass finds nothing more, leaves for a full pass
    only Rollback records (which no entry names): no version a Put or Delete made, no entry at
    or below the safepoint."""
    kv = Kv(store)
    commits = history(kv, clock, seed)
    safepoint = commits[len(commits) // 2]
    now = clock()
    points = [safepoint, *commits[len(commits) // 2 + 1 :: 7], now]
    before = observe(kv, points, now)
    store.advance_safepoint(safepoint)
    removed = []  # per pass: a key with more versions than a step walks takes several
    while not removed or removed[-1]:
        assert len(removed) < 10, removed
        cursor, removed = GcCursor.incremental(), [*removed, 0]
        while not cursor.done:
            step = store.gc_step(cursor, budget)
            cursor, removed[-1] = step.next, removed[-1] + step.versions
            assert observe(kv, points, now) == before  # after every step, not only at the end
    assert removed[0] > 0
    left = _full_pass_plan(store, safepoint)
    with store.storage.read_txn() as r:
        kinds = {r.parse_write(k, r.get("write", k)).kind.name for cf, k in left if cf == "write"}
    assert {cf for cf, _ in left} <= {"write"}, left
    assert kinds <= {"ROLLBACK"}, kinds


def test_an_incremental_pass_costs_the_change_not_the_store(store, clock):
    """2,000 keys written twice and collected by a full pass, then 10 of them written again: the
    next incremental pass examines records in proportion to the 10, not the 2,000 (a full pass
    examines every record), and collects their old versions."""
    kv = Kv(store)
    for round_ in range(2):
        start = clock()
        for k in range(2_000):
            kv.must_prewrite_put(k, f"r{round_}", 0, start)
        commit = clock()
        for k in range(2_000):
            kv.must_commit(k, start, commit)
    assert store.gc(clock()) == 2_000
    for k in range(10):
        kv.must_put(k, "again", clock(), clock())
    store.advance_safepoint(clock())
    cursor, examined, removed = GcCursor.incremental(), 0, 0
    while not cursor.done:
        step = store.gc_step(cursor)
        cursor, examined, removed = step.next, examined + step.examined, removed + step.versions
    assert removed == 10
    assert examined <= 40, examined  # an entry and at most two versions per changed key
    with store.storage.read_txn() as r:
        full = plan_gc_step(r, store.safepoint, GcCursor(), 1_000_000)
    assert full.examined >= 2_000 and not full.doomed  # nothing left; a full walk reads it all
